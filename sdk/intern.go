package sdk

import (
	"sync"
	"sync/atomic"
)

// interner hands out one shared string per distinct byte sequence, so that
// decoding a name seen before allocates nothing. Reads are lock-free: the
// table is an immutable map replaced on write. It holds at most max strings;
// beyond that get allocates, which bounds the memory an unexpected variety
// of names can take.
type interner struct {
	max int
	mu  sync.Mutex // serialises writers
	m   atomic.Pointer[map[string]string]
}

func (in *interner) get(b []byte) string {
	if m := in.m.Load(); m != nil {
		if s, ok := (*m)[string(b)]; ok {
			return s
		}
	}
	s := string(b)
	in.mu.Lock()
	defer in.mu.Unlock()
	old := in.m.Load()
	if old == nil {
		m := map[string]string{s: s}
		in.m.Store(&m)
		return s
	}
	if prev, ok := (*old)[s]; ok {
		return prev
	}
	if len(*old) >= in.max {
		return s
	}
	m := make(map[string]string, len(*old)+1)
	for k, v := range *old {
		m[k] = v
	}
	m[s] = s
	in.m.Store(&m)
	return s
}
