package logging

// TextHandler writes one line per record for a person at a terminal:
//
//	Nov 25 02:31:07.412 INFO  sluice server listening addr=127.0.0.1:8080 worker=embedded
//
// The time is local, the level padded to five columns, then the message
// and the attributes as key=value. A value is quoted (Go syntax) when it
// is empty or holds a space, '=', '"' or any control or non-printing
// character, and so is a message holding a control character: whatever a
// client puts into a logged value cannot move the cursor, change colours
// or forge a second line. Each record is one Write, under a mutex shared
// with the handlers derived from it.

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// TextOptions configure a TextHandler.
type TextOptions struct {
	Level  slog.Leveler // minimum level; nil = info
	Colour bool         // ANSI colours for the level, keys and errors
}

// TextHandler is a slog.Handler writing readable lines; see the file comment.
type TextHandler struct {
	opts   TextOptions
	mu     *sync.Mutex
	w      io.Writer
	attrs  []byte // preformatted attributes of WithAttrs, each with a leading space
	prefix string // group names of WithGroup, each followed by '.'
}

var _ slog.Handler = (*TextHandler)(nil)

// NewTextHandler returns a TextHandler writing to w.
func NewTextHandler(w io.Writer, opts TextOptions) *TextHandler {
	if opts.Level == nil {
		opts.Level = slog.LevelInfo
	}
	return &TextHandler{opts: opts, mu: new(sync.Mutex), w: w}
}

// ANSI SGR sequences.
const (
	ansiReset  = "\x1b[0m"
	ansiFaint  = "\x1b[2m"
	ansiRed    = "\x1b[31m"
	ansiBRed   = "\x1b[1;31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiBlue   = "\x1b[34m"
)

// Enabled reports whether level is at least the handler's level.
func (h *TextHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= h.opts.Level.Level()
}

// Handle writes r as one line.
func (h *TextHandler) Handle(_ context.Context, r slog.Record) error {
	buf := make([]byte, 0, 256)
	if !r.Time.IsZero() {
		buf = h.colour(buf, ansiFaint, r.Time.Local().Format(time.StampMilli))
		buf = append(buf, ' ')
	}
	buf = h.level(buf, r.Level)
	buf = append(buf, ' ')
	if needsQuote(r.Message, true) {
		buf = strconv.AppendQuote(buf, r.Message)
	} else {
		buf = append(buf, r.Message...)
	}
	buf = append(buf, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		buf = h.appendAttr(buf, h.prefix, a)
		return true
	})
	buf = append(buf, '\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(buf)
	return err
}

// WithAttrs returns a handler that writes attrs after every record's message.
func (h *TextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	h2 := *h
	h2.attrs = bytes.Clone(h.attrs)
	for _, a := range attrs {
		h2.attrs = h.appendAttr(h2.attrs, h.prefix, a)
	}
	return &h2
}

// WithGroup returns a handler that prefixes later attributes' keys with name.
func (h *TextHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.prefix = h.prefix + name + "."
	return &h2
}

func (h *TextHandler) level(buf []byte, l slog.Level) []byte {
	s := l.String()
	for len(s) < 5 {
		s += " "
	}
	code := ansiBlue
	switch {
	case l >= slog.LevelError:
		code = ansiBRed
	case l >= slog.LevelWarn:
		code = ansiYellow
	case l >= slog.LevelInfo:
		code = ansiGreen
	}
	return h.colour(buf, code, s)
}

func (h *TextHandler) appendAttr(buf []byte, prefix string, a slog.Attr) []byte {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return buf
	}
	if a.Value.Kind() == slog.KindGroup {
		if a.Key != "" {
			prefix += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			buf = h.appendAttr(buf, prefix, g)
		}
		return buf
	}
	buf = append(buf, ' ')
	key := prefix + a.Key
	if needsQuote(key, false) {
		key = strconv.Quote(key)
	}
	buf = h.colour(buf, ansiFaint, key+"=")
	val := valueString(a.Value)
	if needsQuote(val, false) {
		val = strconv.Quote(val)
	}
	if _, isErr := a.Value.Any().(error); isErr && a.Value.Kind() == slog.KindAny {
		return h.colour(buf, ansiRed, val)
	}
	return append(buf, val...)
}

func (h *TextHandler) colour(buf []byte, code, s string) []byte {
	if !h.opts.Colour {
		return append(buf, s...)
	}
	buf = append(buf, code...)
	buf = append(buf, s...)
	return append(buf, ansiReset...)
}

func valueString(v slog.Value) string {
	switch v.Kind() {
	case slog.KindTime:
		return v.Time().Format(time.RFC3339Nano)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return err.Error()
		}
		if b, ok := v.Any().([]byte); ok {
			return string(b)
		}
	}
	return v.String()
}

// needsQuote reports whether s must be written quoted: it holds a control
// or non-printing character or invalid UTF-8, or (for keys and values,
// spaceOK false) it is empty or holds a space, '=' or '"'.
func needsQuote(s string, spaceOK bool) bool {
	if s == "" {
		return !spaceOK
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return true
		}
		if r == ' ' {
			if !spaceOK {
				return true
			}
		} else if !unicode.IsPrint(r) || (!spaceOK && (r == '=' || r == '"')) {
			return true
		}
		i += size
	}
	return false
}
