package tenants_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/tenants"
)

func TestGenerateKey(t *testing.T) {
	for _, kind := range []string{tenants.KindServiceKey, tenants.KindConsumerKey, tenants.KindOperatorToken} {
		format := regexp.MustCompile(`^` + kind + `[0-9A-Za-z]{32,}$`)
		seen := map[string]bool{}
		for range 200 {
			plain, prefix, hash, err := tenants.GenerateKey(kind)
			if err != nil {
				t.Fatal(err)
			}
			if !format.MatchString(plain) || !tenants.WellFormedKey(plain, kind) {
				t.Fatalf("key %q is not %s + base62", plain, kind)
			}
			if prefix != plain[:8] || !strings.HasPrefix(prefix, kind) {
				t.Fatalf("prefix %q of %q", prefix, plain)
			}
			if hash != tenants.HashKey(plain) || len(hash) != 64 {
				t.Fatalf("hash %q", hash)
			}
			if seen[plain] {
				t.Fatalf("duplicate key %q", plain)
			}
			seen[plain] = true
		}
	}
	if _, _, _, err := tenants.GenerateKey("xx_"); err == nil {
		t.Fatal("unknown kind accepted")
	}
}

// TestGenerateKeyUniform is a coarse check that every base62 character
// turns up at about the same rate; the old modulo bias would make the
// first eight about 25% more frequent than the rest.
func TestGenerateKeyUniform(t *testing.T) {
	counts := map[rune]int{}
	const keys = 2500 // 100,000 characters, about 1,613 each
	for range keys {
		plain, _, _, _ := tenants.GenerateKey(tenants.KindConsumerKey)
		for _, r := range plain[3:] {
			counts[r]++
		}
	}
	if len(counts) != 62 {
		t.Fatalf("%d distinct characters, want 62", len(counts))
	}
	mean := float64(keys*40) / 62
	for r, n := range counts {
		if d := float64(n) - mean; d > mean*0.15 || d < -mean*0.15 {
			t.Errorf("%q appears %d times, mean %.0f", r, n, mean)
		}
	}
}

func TestWellFormedKey(t *testing.T) {
	plain, _, _, _ := tenants.GenerateKey(tenants.KindConsumerKey)
	for _, s := range []string{"", "ck_", plain[:len(plain)-1], plain + "a", "sk_" + plain[3:], plain[:10] + "-" + plain[11:]} {
		if tenants.WellFormedKey(s, tenants.KindConsumerKey) {
			t.Errorf("WellFormedKey(%q) = true", s)
		}
	}
}

func TestHashKeyStable(t *testing.T) {
	// Stored hashes must keep matching: pin the algorithm (hex SHA-256).
	const want = "942d317dc7797b98b262d88716422069144f262ddc1ea8bfe041c3a5ede7c27a"
	if got := tenants.HashKey("ck_test"); got != want {
		t.Fatalf("HashKey = %s, want %s", got, want)
	}
	if tenants.HashToken("ck_test") != want {
		t.Fatal("HashToken differs from HashKey")
	}
}

func TestNewID(t *testing.T) {
	re := regexp.MustCompile(`^pol_[0-9A-Za-z]{20}$`)
	a, b := tenants.NewID(tenants.IDPolicy), tenants.NewID(tenants.IDPolicy)
	if !re.MatchString(a) || a == b {
		t.Fatalf("ids %q %q", a, b)
	}
}

func TestPassword(t *testing.T) {
	h, err := tenants.HashPassword("correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q", h)
	}
	h2, _ := tenants.HashPassword("correct horse battery")
	if h == h2 {
		t.Fatal("two hashes of one password are equal: no salt")
	}
	if !tenants.CheckPassword(h, "correct horse battery") || !tenants.CheckPassword(h2, "correct horse battery") {
		t.Fatal("right password refused")
	}
	for _, wrong := range []string{"", "correct horse batterY", "correct horse battery "} {
		if tenants.CheckPassword(h, wrong) {
			t.Fatalf("wrong password %q accepted", wrong)
		}
	}
	parts := strings.Split(h, "$")
	for _, bad := range []string{
		"", "plain", "$argon2i$v=19$m=19456,t=2,p=1$" + parts[4] + "$" + parts[5],
		"$argon2id$v=19$m=4194304,t=2,p=1$" + parts[4] + "$" + parts[5], // 4 GiB: refused, not computed
		"$argon2id$v=19$m=19456,t=2,p=1$" + parts[4] + "$",
		"$argon2id$v=19$m=19456,t=2,p=1$!!$" + parts[5],
	} {
		if tenants.CheckPassword(bad, "correct horse battery") {
			t.Fatalf("malformed hash %q accepted", bad)
		}
	}
}

func TestToken(t *testing.T) {
	tok, _, _, _ := tenants.GenerateKey(tenants.KindOperatorToken)
	h := tenants.HashToken(tok)
	if !tenants.CheckToken(h, tok) || tenants.CheckToken(h, tok+"x") || tenants.CheckToken("", "") {
		t.Fatal("CheckToken")
	}
	if tenants.ValidateOperatorToken(tok) != nil || tenants.ValidateOperatorToken("short") == nil {
		t.Fatal("ValidateOperatorToken")
	}
}
