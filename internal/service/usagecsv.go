package service

import (
	"encoding/csv"
	"io"
	"strconv"
	"strings"
)

// UsageCSVHeader is the header row of WriteUsageCSV: the same columns for
// either grouping, those of the other grouping left empty.
var UsageCSVHeader = []string{"day", "key_id", "key_name", "key_prefix", "policy", "units"}

// WriteUsageCSV writes u as CSV (RFC 4180), a header row first. The API
// and the dashboard download the same bytes.
func WriteUsageCSV(w io.Writer, u Usage) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(UsageCSVHeader); err != nil {
		return err
	}
	for _, r := range u.Rows {
		if err := cw.Write([]string{r.Day, r.KeyID, csvText(r.KeyName), r.KeyPrefix, csvText(r.Policy), strconv.FormatInt(r.Units, 10)}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// UsageCSVName is the file name a download of u suggests.
func UsageCSVName(u Usage) string {
	return "usage-" + u.From + "-to-" + u.To + "-by-" + u.Group + ".csv"
}

// csvText keeps a name a tenant chose from being read as a formula by a
// spreadsheet that opens the file: a leading =, +, -, @ or control
// character is escaped with a quote, as OWASP advises.
func csvText(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
