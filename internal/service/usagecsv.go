package service

import (
	"context"
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
	cw := NewUsageCSV(w)
	if err := cw.Write(u.Rows); err != nil {
		return err
	}
	return cw.Flush()
}

// UsageCSV writes usage rows as CSV, the header row before the first:
// one file from one page or from many.
type UsageCSV struct {
	cw     *csv.Writer
	header bool
}

// NewUsageCSV answers a UsageCSV writing to w.
func NewUsageCSV(w io.Writer) *UsageCSV { return &UsageCSV{cw: csv.NewWriter(w)} }

// Write writes rows, after the header row if it is not written yet.
func (u *UsageCSV) Write(rows []UsageRow) error {
	if !u.header {
		u.header = true
		if err := u.cw.Write(UsageCSVHeader); err != nil {
			return err
		}
	}
	for _, r := range rows {
		if err := u.cw.Write([]string{r.Day, r.KeyID, csvText(r.KeyName), r.KeyPrefix, csvText(r.Policy), strconv.FormatInt(r.Units, 10)}); err != nil {
			return err
		}
	}
	return nil
}

// Flush writes what is buffered (the header row, when no row came).
func (u *UsageCSV) Flush() error {
	if err := u.Write(nil); err != nil {
		return err
	}
	u.cw.Flush()
	return u.cw.Error()
}

// UsageReader answers usage queries (Analytics does).
type UsageReader interface {
	Usage(ctx context.Context, q UsageQuery) (Usage, error)
}

// UsagePages answers q's range page after page, MaxUsageRows rows each,
// to fn, in order, until the last or an error: the dashboard reads a
// whole month so. A worker older than paging answers the whole range in
// one.
func UsagePages(ctx context.Context, a UsageReader, q UsageQuery, fn func(Usage) error) error {
	q.Limit, q.Cursor = MaxUsageRows, ""
	for {
		u, err := a.Usage(ctx, q)
		if err != nil {
			return err
		}
		if err := fn(u); err != nil {
			return err
		}
		if u.NextCursor == "" {
			return nil
		}
		q.Cursor = u.NextCursor
	}
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
