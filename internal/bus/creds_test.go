package bus

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// A .creds file (user JWT and nkey seed, decentralised auth) is accepted by
// a NATS that trusts its operator.
func TestConnectCredsFile(t *testing.T) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	okp, err := nkeys.CreateOperator()
	must(err)
	opub, _ := okp.PublicKey()
	opc := jwt.NewOperatorClaims(opub)
	opJWT, err := opc.Encode(okp)
	must(err)
	opc, err = jwt.DecodeOperatorClaims(opJWT)
	must(err)

	akp, err := nkeys.CreateAccount()
	must(err)
	apub, _ := akp.PublicKey()
	accJWT, err := jwt.NewAccountClaims(apub).Encode(okp)
	must(err)

	ukp, err := nkeys.CreateUser()
	must(err)
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.IssuerAccount = apub
	userJWT, err := uc.Encode(akp)
	must(err)
	seed, err := ukp.Seed()
	must(err)
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	must(err)
	credsFile := filepath.Join(t.TempDir(), "sluice.creds")
	must(os.WriteFile(credsFile, creds, 0o600))

	resolver := &server.MemAccResolver{}
	must(resolver.Store(apub, accJWT))
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TrustedOperators: []*jwt.OperatorClaims{opc}, AccountResolver: resolver})
	must(err)
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	nc, err := Connect(ns.ClientURL(), nil, "test", Auth{CredsFile: credsFile}, slog.New(slog.DiscardHandler))
	must(err)
	defer nc.Close()
	if err := nc.Flush(); err != nil || !nc.IsConnected() {
		t.Fatalf("with the creds file: %v (last error %v)", err, nc.LastError())
	}
}
