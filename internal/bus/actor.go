package bus

// Who makes a config write travels with the request, in a header rather
// than in every request's body, so that each write's payload stays as it
// was and a worker reads the actor in one place for all of them. The
// header's value is versioned JSON like every payload.

import (
	"encoding/json"
	"fmt"

	"github.com/sluicehq/sluice/internal/tenants"
)

// ActorHeader carries the actor of a config request (EncodeActor). Request
// sets it from the context (tenants.WithActor); the worker puts it back
// into the context of the request's handler, and the store records it in
// the audit log.
const ActorHeader = "Sluice-Actor"

// actorWire is ActorHeader's value.
type actorWire struct {
	V int `json:"v"`
	tenants.Actor
}

// EncodeActor returns ActorHeader's value for a.
func EncodeActor(a tenants.Actor) string {
	b, _ := json.Marshal(actorWire{V: WireVersion, Actor: a})
	return string(b)
}

// DecodeActor reads ActorHeader's value, refusing versions it does not know
// and actors without a kind.
func DecodeActor(s string) (tenants.Actor, error) {
	var w actorWire
	if err := json.Unmarshal([]byte(s), &w); err != nil {
		return tenants.Actor{}, fmt.Errorf("actor header: %w", err)
	}
	if w.V != WireVersion {
		return tenants.Actor{}, fmt.Errorf("actor header: unknown wire version %d", w.V)
	}
	if w.Kind == "" {
		return tenants.Actor{}, fmt.Errorf("actor header: no kind")
	}
	return w.Actor, nil
}
