package bus

// How a Sluice process proves who it is to NATS, and how it checks that the
// NATS it reached is the right one. Servers and the worker take the same
// options; Connect applies them. Secrets (password, token) come from the
// environment only, so they never show in a process listing; files come
// from flags with SLUICE_* twins.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
)

// Auth is a NATS client identity and its TLS settings. The zero value
// connects without credentials and without TLS (the in-process case).
type Auth struct {
	CredsFile string // --nats-creds, SLUICE_NATS_CREDS: a .creds file (user JWT + nkey seed)
	NKeyFile  string // --nats-nkey, SLUICE_NATS_NKEY: a file holding a user nkey seed (SU…)
	User      string // SLUICE_NATS_USER
	Password  string // SLUICE_NATS_PASSWORD
	Token     string // SLUICE_NATS_TOKEN
	CAFile    string // --nats-ca, SLUICE_NATS_CA: PEM roots that sign the NATS server's certificate
	CertFile  string // --nats-cert, SLUICE_NATS_CERT: PEM client certificate (mutual TLS)
	KeyFile   string // --nats-key, SLUICE_NATS_KEY: its PEM private key
}

// RegisterFlags adds the file options to fs, each defaulting to its
// SLUICE_* environment twin, and reads the secrets from getenv. Call
// Validate after fs.Parse.
func (a *Auth) RegisterFlags(fs *flag.FlagSet, getenv func(string) string) {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	fs.StringVar(&a.CredsFile, "nats-creds", env("SLUICE_NATS_CREDS", a.CredsFile), "NATS credentials file (user JWT and nkey seed) (SLUICE_NATS_CREDS)")
	fs.StringVar(&a.NKeyFile, "nats-nkey", env("SLUICE_NATS_NKEY", a.NKeyFile), "file holding a NATS user nkey seed (SLUICE_NATS_NKEY)")
	fs.StringVar(&a.CAFile, "nats-ca", env("SLUICE_NATS_CA", a.CAFile), "PEM CA file that verifies the NATS server's certificate; turns on TLS (SLUICE_NATS_CA)")
	fs.StringVar(&a.CertFile, "nats-cert", env("SLUICE_NATS_CERT", a.CertFile), "PEM client certificate for NATS mutual TLS (SLUICE_NATS_CERT)")
	fs.StringVar(&a.KeyFile, "nats-key", env("SLUICE_NATS_KEY", a.KeyFile), "PEM private key of --nats-cert (SLUICE_NATS_KEY)")
	a.User = env("SLUICE_NATS_USER", a.User)
	a.Password = env("SLUICE_NATS_PASSWORD", a.Password)
	a.Token = env("SLUICE_NATS_TOKEN", a.Token)
}

// Identity names the credential kind in use ("none" without one), for logs.
func (a Auth) Identity() string {
	switch {
	case a.CredsFile != "":
		return "creds"
	case a.NKeyFile != "":
		return "nkey"
	case a.User != "":
		return "user"
	case a.Token != "":
		return "token"
	}
	return "none"
}

// HasCredentials reports whether any credential is set.
func (a Auth) HasCredentials() bool { return a.Identity() != "none" }

// TLS reports whether the connection is made with TLS.
func (a Auth) TLS() bool { return a.CAFile != "" || a.CertFile != "" }

// Validate rejects contradictory options and files that cannot be read, so
// --check-config reports them instead of a connection that never succeeds.
func (a Auth) Validate() error {
	n := 0
	for _, set := range []bool{a.CredsFile != "", a.NKeyFile != "", a.User != "" || a.Password != "", a.Token != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return errors.New("NATS credentials: set only one of --nats-creds, --nats-nkey, SLUICE_NATS_USER/SLUICE_NATS_PASSWORD or SLUICE_NATS_TOKEN")
	}
	if (a.User == "") != (a.Password == "") {
		return errors.New("NATS credentials: set both SLUICE_NATS_USER and SLUICE_NATS_PASSWORD, or neither")
	}
	if (a.CertFile == "") != (a.KeyFile == "") {
		return errors.New("NATS TLS: set both --nats-cert and --nats-key, or neither")
	}
	for _, f := range []struct{ flag, path string }{
		{"--nats-creds", a.CredsFile}, {"--nats-nkey", a.NKeyFile}, {"--nats-ca", a.CAFile},
		{"--nats-cert", a.CertFile}, {"--nats-key", a.KeyFile},
	} {
		if f.path == "" {
			continue
		}
		if err := readable(f.path); err != nil {
			return fmt.Errorf("%s: %w", f.flag, err)
		}
	}
	if a.NKeyFile != "" {
		if _, err := nats.NkeyOptionFromSeed(a.NKeyFile); err != nil {
			return fmt.Errorf("--nats-nkey %s: %w", a.NKeyFile, err)
		}
	}
	if a.CAFile != "" {
		pem, _ := os.ReadFile(a.CAFile)
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return fmt.Errorf("--nats-ca %s: no PEM certificate in it", a.CAFile)
		}
	}
	if a.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(a.CertFile, a.KeyFile); err != nil {
			return fmt.Errorf("--nats-cert/--nats-key: %w", err)
		}
	}
	return nil
}

func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	return nil
}

// options turns a into nats.go options.
func (a Auth) options() ([]nats.Option, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	switch {
	case a.CredsFile != "":
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	case a.NKeyFile != "":
		o, err := nats.NkeyOptionFromSeed(a.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nats nkey %s: %w", a.NKeyFile, err)
		}
		opts = append(opts, o)
	case a.User != "":
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	case a.Token != "":
		opts = append(opts, nats.Token(a.Token))
	}
	if a.CAFile != "" {
		opts = append(opts, nats.RootCAs(a.CAFile))
	}
	if a.CertFile != "" {
		opts = append(opts, nats.ClientCert(a.CertFile, a.KeyFile))
	}
	return opts, nil
}
