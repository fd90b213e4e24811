package bus

// NATS URLs may carry a credential (nats://user:password@host or
// nats://token@host). Whatever shows a URL (logs, errors, --help) shows it
// through RedactURL, so the credential appears nowhere but in the
// connection itself.

import "strings"

// redacted replaces a URL's user information.
const redacted = "redacted"

// RedactURL returns urls (one NATS URL or several, comma-separated) with
// the user information of each (user, password or token) replaced by
// "redacted". It parses nothing, so a malformed URL is redacted too.
func RedactURL(urls string) string {
	if !strings.Contains(urls, "@") {
		return urls
	}
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		parts[i] = redactOne(p)
	}
	return strings.Join(parts, ",")
}

func redactOne(u string) string {
	at := strings.LastIndex(u, "@")
	if at < 0 {
		return u
	}
	start := 0
	if i := strings.Index(u, "://"); i >= 0 && i < at {
		start = i + len("://")
	}
	for start < at && u[start] == ' ' {
		start++
	}
	return u[:start] + redacted + u[at:]
}

// urlSecrets returns the user information of each URL in urls, to be
// cut out of text that may quote it.
func urlSecrets(urls string) []string {
	var out []string
	for _, p := range strings.Split(urls, ",") {
		at := strings.LastIndex(p, "@")
		if at < 0 {
			continue
		}
		start := 0
		if i := strings.Index(p, "://"); i >= 0 && i < at {
			start = i + len("://")
		}
		if info := strings.TrimSpace(p[start:at]); info != "" {
			out = append(out, info)
		}
	}
	return out
}

// redactError is an error whose message had credentials cut out.
// errors.Is and errors.As still see the original.
type redactError struct {
	msg string
	err error
}

func (e *redactError) Error() string { return e.msg }
func (e *redactError) Unwrap() error { return e.err }

// RedactError returns err with the user information of urls cut out of its
// message (a URL parser quotes the whole URL), or err itself when the
// message holds none.
func RedactError(err error, urls string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	out := msg
	for _, s := range urlSecrets(urls) {
		out = strings.ReplaceAll(out, s, redacted)
	}
	if out == msg {
		return err
	}
	return &redactError{msg: out, err: err}
}

// URLFlag is a flag.Value for a NATS URL whose String (what flag's usage
// prints as the default) is redacted.
type URLFlag struct{ URL *string }

func (f URLFlag) String() string {
	if f.URL == nil {
		return ""
	}
	return RedactURL(*f.URL)
}

// Set sets the URL.
func (f URLFlag) Set(s string) error { *f.URL = s; return nil }
