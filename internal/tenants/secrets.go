package tenants

// Secrets come in two strengths, hashed differently on purpose.
//
// Keys (service, consumer, operator token) are 40 random base62 characters,
// about 238 bits: nobody can guess one or brute-force it from its hash, so
// a fast hash (SHA-256) loses nothing, and it lets a server find a key by
// its hash in a map on every check without spending CPU on key stretching.
//
// Passwords are chosen by people and may be weak, so they are stretched
// with argon2id and a random salt, and compared in constant time.

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/crypto/argon2"
)

// Key kinds: the prefix of a generated key.
const (
	KindServiceKey    = "sk_"
	KindConsumerKey   = "ck_"
	KindOperatorToken = "op_"
)

// Id prefixes.
const (
	IDTenant      = "ten_"
	IDUser        = "usr_"
	IDServiceKey  = "skey_"
	IDConsumerKey = "ckey_"
	IDPolicy      = "pol_"
	IDBlock       = "blk_"
)

const (
	keyRandomChars = 40
	idRandomChars  = 20
	prefixLength   = 8
	base62         = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// randomBase62 returns n characters drawn uniformly from base62. Bytes of
// 248 and above are discarded rather than reduced modulo 62, which would
// favour the first eight characters.
func randomBase62(n int) string {
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/8+8)
	for len(out) < n {
		rand.Read(buf) // never fails (crypto/rand crashes the program instead)
		for _, b := range buf {
			if b < 248 && len(out) < n {
				out = append(out, base62[b%62])
			}
		}
	}
	return string(out)
}

// GenerateKey returns a new key of the given kind (KindServiceKey,
// KindConsumerKey or KindOperatorToken): the plain key, shown once to its
// owner; its prefix, the first 8 characters, which lists show; and the
// hash, which is all that is stored.
func GenerateKey(kind string) (plain, prefix, hash string, err error) {
	switch kind {
	case KindServiceKey, KindConsumerKey, KindOperatorToken:
	default:
		return "", "", "", fmt.Errorf("generate key: unknown kind %q", kind)
	}
	plain = kind + randomBase62(keyRandomChars)
	return plain, plain[:prefixLength], HashKey(plain), nil
}

// WellFormedKey reports whether s looks like a key of the given kind, so a
// caller can refuse garbage without a lookup.
func WellFormedKey(s, kind string) bool {
	rest, ok := strings.CutPrefix(s, kind)
	if !ok || len(rest) != keyRandomChars {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if strings.IndexByte(base62, rest[i]) < 0 {
			return false
		}
	}
	return true
}

// HashKey returns the stored form of a key: hex SHA-256.
func HashKey(plain string) string {
	sum := sha256.Sum256([]byte(plain))
	return hex.EncodeToString(sum[:])
}

// HashToken returns the stored form of the operator token. An operator
// who sets the token by hand should make it as random as a generated one
// (GenerateKey(KindOperatorToken)); ValidateOperatorToken insists on length.
func HashToken(token string) string { return HashKey(token) }

// CheckToken reports, in constant time, whether token hashes to hash.
func CheckToken(hash, token string) bool {
	if hash == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(hash), []byte(HashToken(token))) == 1
}

// MinOperatorTokenLength is the shortest operator token accepted.
const MinOperatorTokenLength = 32

// ValidateOperatorToken checks a token an operator chose.
func ValidateOperatorToken(token string) error {
	if len(token) < MinOperatorTokenLength {
		return invalid("operator_token", "must be at least %d characters", MinOperatorTokenLength)
	}
	return nil
}

// NewID returns prefix followed by 20 random base62 characters (about 119
// bits), such as "pol_3kTm...".
func NewID(prefix string) string { return prefix + randomBase62(idRandomChars) }

// argon2id parameters (OWASP's recommended minimum: 19 MiB, 2 passes).
// They are stored in each hash, so raising them later leaves old hashes
// valid.
const (
	argonMemory  = 19 * 1024 // KiB
	argonTime    = 2
	argonThreads = 1
	argonKeyLen  = 32
	argonSaltLen = 16
)

// HashPassword hashes a password with argon2id and a random salt, in the
// PHC string format: $argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>.
func HashPassword(pw string) (string, error) {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("hash password: %w", err)
	}
	key := argon2.IDKey([]byte(pw), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, argonMemory, argonTime, argonThreads, b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// CheckPassword reports whether pw matches a hash from HashPassword. It
// compares in constant time and answers false for a malformed hash or one
// whose parameters are out of bounds (so a planted hash cannot make a
// sign-in cost gigabytes).
func CheckPassword(hash, pw string) bool {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return false
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false
	}
	var m, t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil {
		return false
	}
	if m < 8 || m > 256*1024 || t < 1 || t > 16 || p < 1 || p > 16 {
		return false
	}
	b64 := base64.RawStdEncoding
	salt, err := b64.DecodeString(parts[4])
	if err != nil || len(salt) < 8 {
		return false
	}
	want, err := b64.DecodeString(parts[5])
	if err != nil || len(want) < 16 || len(want) > 64 {
		return false
	}
	got := argon2.IDKey([]byte(pw), salt, t, m, p, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
}

// dummyPasswordHash is checked against when a sign-in names an unknown
// email, so that answer takes as long as a wrong password does.
var dummyPasswordHash = sync.OnceValue(func() string {
	h, _ := HashPassword("no user has this password")
	return h
})
