package app

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"golang.org/x/term"
)

// Log formats of --log-format.
const (
	LogFormatAuto = "auto" // text on a terminal, JSON otherwise
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// LogFormatUsage is the help text of --log-format, on server and worker.
const LogFormatUsage = "auto: one readable line per record when stderr is a terminal, JSON otherwise; text; json"

// NewLogger returns the logger a process uses, at the named level and in
// the named format (LogFormatAuto, LogFormatText or LogFormatJSON). Auto
// picks text when w is a terminal. Text is coloured only on a terminal,
// and not when NO_COLOR is set or TERM is dumb (getenv reads both).
func NewLogger(w io.Writer, level, format string, getenv func(string) string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	if err := ValidateLogFormat(format); err != nil {
		return nil, err
	}
	tty := isTerminal(w)
	if format == LogFormatJSON || (format == LogFormatAuto && !tty) {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
	}
	colour := tty && getenv("NO_COLOR") == "" && getenv("TERM") != "dumb"
	return slog.New(NewTextHandler(w, TextOptions{Level: l, Colour: colour})), nil
}

// ValidateLogFormat checks a --log-format value.
func ValidateLogFormat(format string) error {
	switch format {
	case LogFormatAuto, LogFormatText, LogFormatJSON:
		return nil
	}
	return fmt.Errorf("--log-format %q: use auto, text or json", format)
}

// isTerminal reports whether w is a file open on a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
