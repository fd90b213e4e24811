package webhook

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// KeyFile is the name of the key that seals webhook secrets, in the
// worker's data directory.
const KeyFile = "webhook.key"

// Sealer seals webhook secrets with AES-256-GCM, so that a copy of the
// database (a backup, a leaked file) without the key file does not reveal
// them. It implements tenants.WebhookSealer.
type Sealer struct{ aead cipher.AEAD }

// NewSealer returns a sealer over a 32-byte key.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("webhook key: %d bytes, want 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// LoadSealer reads the key at path, making it (mode 0600) the first time.
func LoadSealer(path string) (*Sealer, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key = make([]byte, 32)
		rand.Read(key)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("webhook key: %w", err)
		}
		if _, err := f.Write(key); err != nil {
			f.Close()
			return nil, fmt.Errorf("webhook key: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("webhook key: %w", err)
		}
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("webhook key: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("webhook key: %w", err)
	}
	return NewSealer(key)
}

// Seal encrypts plain under a fresh nonce, which it prefixes.
func (s *Sealer) Seal(plain []byte) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize())
	rand.Read(nonce)
	return s.aead.Seal(nonce, nonce, plain, nil), nil
}

// Open decrypts what Seal made.
func (s *Sealer) Open(sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("webhook secret: sealed value too short")
	}
	return s.aead.Open(nil, sealed[:n], sealed[n:], nil)
}
