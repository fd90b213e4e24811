package rlsconf

import "strconv"

// Plan looks up each descriptor of a request as the reference's
// constructLimitsToCheck does, answering the limit to check for each (nil
// for none) and whether each is unlimited. An unlimited match is not
// checked: it is answered OK with math.MaxUint32 remaining. A match whose
// rate_limit.name another match of the request replaces is not checked
// either; the replacing match's own limit still is, even when unlimited.
// The request's wildcard matching is bounded by MatchBudget.
func Plan(cfg *Config, domain string, ds []RequestDescriptor) (limits []*Limit, unlimited []bool) {
	limits = make([]*Limit, len(ds))
	unlimited = make([]bool, len(ds))
	var replacing map[string]bool
	st := matchState{budget: MatchBudget}
	for i, d := range ds {
		l := cfg.lookup(domain, d, &st)
		if l == nil {
			continue
		}
		for _, name := range l.Replaces {
			if replacing == nil {
				replacing = map[string]bool{}
			}
			replacing[name] = true
		}
		if l.Unlimited {
			unlimited[i] = true
			continue
		}
		limits[i] = l
	}
	for i, l := range limits {
		if l != nil && l.Name != "" && replacing[l.Name] {
			limits[i] = nil
		}
	}
	return limits, unlimited
}

// Code is a descriptor's or a request's answer, numbered as the
// reference's RateLimitResponse.Code.
type Code int32

// The codes.
const (
	CodeUnknown   Code = 0
	CodeOK        Code = 1
	CodeOverLimit Code = 2
)

func (c Code) String() string {
	switch c {
	case CodeUnknown:
		return "UNKNOWN"
	case CodeOK:
		return "OK"
	case CodeOverLimit:
		return "OVER_LIMIT"
	}
	return "Code(" + strconv.Itoa(int(c)) + ")"
}

// Overall is the request's code from its descriptors' codes, as the
// reference's shouldRateLimitWorker decides it: OVER_LIMIT when any
// descriptor not in quota mode is over its limit, or when there is at
// least one descriptor in quota mode and every one of them is over.
//
// codes are the descriptors' codes after shadow mode (a limit in shadow
// mode answers OK); quota[i] is whether descriptor i's limit is in quota
// mode (Limit.QuotaMode, or the server's global quota mode), and must be
// false for a descriptor Plan found unlimited. A missing quota[i] is false.
// The server's global shadow mode, which turns the answer to OK, is the
// caller's.
func Overall(codes []Code, quota []bool) Code {
	overRate, overQuota, inQuota := 0, 0, 0
	for i, c := range codes {
		q := i < len(quota) && quota[i]
		if q {
			inQuota++
		}
		if c != CodeOverLimit {
			continue
		}
		if q {
			overQuota++
		} else {
			overRate++
		}
	}
	if overRate > 0 || (inQuota > 0 && overQuota == inQuota) {
		return CodeOverLimit
	}
	return CodeOK
}
