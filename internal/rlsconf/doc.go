// Package rlsconf reads, checks, matches and writes the configuration
// format of envoyproxy/ratelimit (the reference): a YAML file per domain,
// holding a tree of descriptors with rate limits.
//
// Parse reads a file as the reference does and refuses what it refuses,
// reporting every problem at once as file:line: field: message. Marshal
// writes a File back as a file the reference loads. Nodes and Build turn a
// tree into one row per node and back. Compile and Config.Lookup match a
// request's descriptor as the reference's GetLimit does, down to its
// metric keys and the counter key of share_threshold; Plan and Overall
// are its service's replaces, unlimited and quota_mode rules; Unit's
// WindowStart and ResetAfter are its fixed windows. The package does no
// I/O and imports only the standard library and yaml.
//
// # Sluice's extras
//
// A descriptor may hold a mapping under sluice:, which the reference
// refuses, so a file without it stays a reference file:
//
//	descriptors:
//	  - key: api_key
//	    rate_limit: {unit: second, requests_per_unit: 10}
//	    sluice:
//	      algorithm: token_bucket   # fixed_window (default), sliding_window, token_bucket, sliding_log
//	      burst: 40                 # token_bucket's capacity; only token_bucket takes one
//	      consistency: local        # exact (default) or local
//	      denied: uncounted         # counted (default, the reference's) or uncounted
//	      limits:                   # more limits of the rule; all must allow
//	        - {name: daily, requests_per_unit: 10000, unit: day}
//
// A descriptor with sluice: needs a rate_limit unless it gives limits;
// an unlimited rate_limit takes no algorithm, burst or limits. A rule
// holds at most 16 limits; their names are required when it holds
// several, and distinct (rate_limit.name included). Every limit needs at
// least 1 request per unit, but a rate_limit counted in fixed windows (as
// the reference's 0 denies every request); a sliding_log at most 1000.
// Marshal refuses a File using extras; MarshalWithExtras writes them.
//
// # Where Parse reads as yaml.v2 reads
//
// The reference decodes with yaml.v2 (YAML 1.1), Sluice with yaml.v3, so
// Parse resolves every scalar as v2 does: yes/no/on/off/y/n are booleans
// (so a key y: is not a string, and is refused), 010 is octal 8, 0x10 is
// 16, 1_000 is 1000, and a date stays text. Outside metadata the reference
// refuses a float or an integer beyond 64 bits anywhere, even as a value
// (value: 1.5 must be quoted), but text fields take any other scalar's
// text (value: 12 is "12", value: yes is "yes"). A key given twice is not
// an error: the later one wins, and a second rate_limit or metadata is
// decoded into the first (v2 reuses the pointer and the map). Merge keys
// (<<) are applied in order, a later key overwriting an earlier one. A
// key the reference knows but in the wrong place (unit: at descriptor
// level, shadow_mode: inside rate_limit) is accepted and ignored, as in
// the reference. Metadata numbers are float64 and nested metadata keys
// are printed with %v (true, 1.5), as the reference hands them to
// protobuf.
//
// # Where Sluice knowingly differs
//
//   - Bounds: a file over MaxFileSize, nesting descriptors or metadata
//     deeper than MaxDepth (or YAML deeper than 3×MaxDepth+8), with more
//     than MaxDescriptors, with a full key longer than MaxFullKey, or whose
//     aliases expand past MaxAliasFactor times the nodes written is refused
//     (yaml.v2's own alias bound is looser). So reading, compiling and
//     writing cost time and memory linear in the file. Parse reports at
//     most 200 problems, then how many more there are.
//   - Compile refuses two files with one domain, the reference's default;
//     its merge_domain_configs option is not provided.
//   - A metadata mapping whose distinct keys print the same (1 and "1")
//     is refused: the reference keeps one of them by Go's map order.
//   - A plain scalar tagged with the non-specific tag "!" is resolved by
//     its text; v2 reads it as a string. yaml.v3's parser may accept or
//     refuse a few exotic syntaxes differently from v2's (both derive from
//     libyaml).
//   - WindowStart floors an instant before 1970 where the reference's
//     integer division truncates; at or after 1970 they agree, and equal
//     Sluice's fixed windows.
//   - An Override with an invalid unit is answered as given (the
//     reference panics computing its window); Unit.Valid tells.
//
// The README of the reference and its code disagree in places; the code
// (and its tests) is followed: share_threshold is allowed with a '*'
// anywhere in the key_value, where the README says a trailing one; with
// value_to_metric, share_threshold's metric key holds the whole pattern
// and no value for a level matched by key alone (route_api/*.method, where
// the README shows route_api.method_GET). Unsaid in the README: a '*' in a
// descriptor's key makes a wildcard too, matched against the request's
// whole key_value, and an entry's key_value is looked up as key_value even
// when its value is empty (so a key written "k_" matches k="").
package rlsconf
