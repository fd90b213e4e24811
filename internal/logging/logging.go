// Package logging makes the logger a Sluice process writes with: JSON,
// or one readable line per record on a terminal (TextHandler). The server
// and the worker take --log-level and --log-format for it.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"golang.org/x/term"
)

// Log formats of --log-format.
const (
	FormatAuto = "auto" // text on a terminal, JSON otherwise
	FormatText = "text"
	FormatJSON = "json"
)

// FormatUsage is the help text of --log-format, on server and worker.
const FormatUsage = "auto: one readable line per record when stderr is a terminal, JSON otherwise; text; json"

// New returns the logger a process uses, at the named level and in
// the named format (FormatAuto, FormatText or FormatJSON). Auto
// picks text when w is a terminal. Text is coloured only on a terminal,
// and not when NO_COLOR is set or TERM is dumb (getenv reads both).
func New(w io.Writer, level, format string, getenv func(string) string) (*slog.Logger, error) {
	l, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	if err := ValidateFormat(format); err != nil {
		return nil, err
	}
	tty := isTerminal(w)
	if format == FormatJSON || (format == FormatAuto && !tty) {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
	}
	colour := tty && getenv("NO_COLOR") == "" && getenv("TERM") != "dumb"
	return slog.New(NewTextHandler(w, TextOptions{Level: l, Colour: colour})), nil
}

// ParseLevel reads a --log-level value.
func ParseLevel(level string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return 0, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	return l, nil
}

// ValidateFormat checks a --log-format value.
func ValidateFormat(format string) error {
	switch format {
	case FormatAuto, FormatText, FormatJSON:
		return nil
	}
	return fmt.Errorf("--log-format %q: use auto, text or json", format)
}

// isTerminal reports whether w is a file open on a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
