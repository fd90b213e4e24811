package app

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// nodeIDFile keeps the suffix of the default node name in the data
// directory, so a server keeps its name across restarts.
const nodeIDFile = "node-id"

// defaultNode is the node name of a server started without --node: the
// host name plus a random suffix kept in dataDir. Two servers on one host
// (or two pods that share a host name) get different names as long as each
// has its own data directory; two that share one share the name, and the
// second is refused at start (see cluster.NodeTakenError).
func defaultNode(dataDir string) (string, error) {
	host, _ := os.Hostname()
	path := filepath.Join(dataDir, nodeIDFile)
	b, err := os.ReadFile(path)
	suffix := strings.TrimSpace(string(b))
	if os.IsNotExist(err) || (err == nil && !validSuffix(suffix)) {
		var raw [4]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return "", err
		}
		suffix = hex.EncodeToString(raw[:])
		if err := os.WriteFile(path, []byte(suffix+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("node id: %w", err)
		}
	} else if err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	return sanitizeNode(host) + "-" + suffix, nil
}

func validSuffix(s string) bool {
	if len(s) != 8 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
