package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
)

// Sign answers the webhook-signature header of a delivery, per Standard
// Webhooks: for each secret ("whsec_" and the key in base64) "v1," and
// the base64 HMAC-SHA256 of "id.timestamp.body", space-separated.
func Sign(secrets []string, id string, timestamp int64, body []byte) string {
	var sb strings.Builder
	for i, s := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil {
			continue
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(strconv.FormatInt(timestamp, 10)))
		mac.Write([]byte{'.'})
		mac.Write(body)
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString("v1,")
		sb.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return sb.String()
}
