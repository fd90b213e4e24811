// Package limitsfile is Sluice's limits-as-code format: a YAML file that
// holds a tenant's policies and, when their sections are present, the
// tiers and overrides of its consumer keys and its blocks (docs/LIMITS.md).
//
// Parse decodes a file strictly and validates it with the server's own
// rules (internal/tenants), answering every problem it finds at once, each
// naming the file, line and field. Diff compares a parsed file with what a
// tenant has now and answers a Plan; Marshal writes a file back, so an
// export of the server's state reads back as the same configuration.
//
// The package does no I/O: the sluice command fetches the state and applies
// the plan through the HTTP API.
package limitsfile

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/tenants"
)

// Version is the only file version this package reads and writes.
const Version = 1

// File is a parsed limits file.
type File struct {
	// Name is the file name problems are reported under.
	Name     string
	Version  int
	Policies []tenants.Policy
	// Keys are managed only when the file has a keys section (HasKeys);
	// likewise Blocks (HasBlocks). An absent section leaves the server's
	// objects of that kind alone.
	Keys      []Key
	Blocks    []Block
	HasKeys   bool
	HasBlocks bool

	// lines maps a field path ("policies[1].tiers.pro.limit") to the line
	// it was written on, for problems found after decoding.
	lines map[string]int
}

// Key is what a file says about one existing consumer key. Keys are made
// and revoked with the key verbs (their secrets are shown once), never by
// a file; a file sets their name, tier and overrides.
type Key struct {
	ID string
	// Name and Tier are left as they are when empty.
	Name string
	Tier string
	// Overrides replace the key's tier limits per policy name; an entry
	// without overrides removes the key's overrides.
	Overrides map[string]tenants.Limits
	// Customer is the id of the customer the key belongs to; left as it
	// is when empty (a file attaches or moves keys, never detaches them).
	Customer string
}

// Block is one blocked identity of the tenant (operator only).
type Block struct {
	Identity  tenants.Identity
	Reason    string
	ExpiresAt *time.Time
}

// Problem is one thing wrong with a file.
type Problem struct {
	File    string
	Line    int
	Field   string
	Message string
}

func (p Problem) String() string {
	if p.Field == "" {
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Message)
	}
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Field, p.Message)
}

// Problems is every problem found in a file, in the order of the file.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// line is the line field was written on, or that of the nearest enclosing
// field that was written (a problem with a default names its object).
func (f *File) line(field string) int {
	for field != "" {
		if l, ok := f.lines[field]; ok {
			return l
		}
		field = parent(field)
	}
	return 1
}

// parent strips the last ".name" or "[index]" of a field path.
func parent(field string) string {
	if strings.HasSuffix(field, "]") {
		if i := strings.LastIndexByte(field, '['); i >= 0 {
			return field[:i]
		}
	}
	if i := strings.LastIndexByte(field, '.'); i >= 0 {
		return field[:i]
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
