package bus

// The two roles a NATS client of Sluice plays, and what each may publish
// and subscribe. The worker owns the data: it serves the request subjects,
// announces config changes and owns the streams. A server asks the worker,
// publishes bucket states and counters, talks to other servers, and keeps
// leases and session revocations in JetStream KV. A server's credential
// therefore cannot bootstrap the operator, impersonate the worker (subscribe
// to its request subjects), announce config changes, or delete or purge the
// streams. The embedded NATS applies these permissions to the users it makes;
// docs/NATS.md shows the same lists as a nats-server configuration (a test
// keeps the two equal).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// Role is one kind of Sluice NATS client and its subject permissions.
// Replies to requests it received are always allowed (allow_responses).
type Role struct {
	Name           string
	PublishAllow   []string
	PublishDeny    []string
	SubscribeAllow []string
}

// WorkerRole is cmd/worker's (or the embedded worker's) permissions.
func WorkerRole() Role {
	return Role{
		Name: "worker",
		PublishAllow: []string{
			ChangesSubject,
			"$JS.API.>",  // streams, consumers, fetching
			"$JS.ACK.>",  // acks after commit
			replSubjects, // the replication log, snapshot requests
			"$KV." + WorkerLeaseBucket + ".>",
		},
		SubscribeAllow: []string{
			ConfigPrefix + ".>",
			"sluice.worker.>",
			AnalyticsPrefix + ".>",
			replSubjects, // snapshot requests from the standby
			"$SRV.>",     // the service's discovery subjects
			"_INBOX.>",
		},
	}
}

// ServerConfigOps are the config operations a server may ask the worker,
// one by one: the operation table's (ConfigOps), which is what its front
// doors (the API, the dashboard, the engine) call, and nothing else. None
// answers a password hash: the worker checks passwords itself
// (OpUserSignIn). An operation servers must not call does not belong in
// ConfigOps; list a new one in docs/NATS.md too.
var ServerConfigOps = opNames(ConfigOps)

func opNames(ops []AnyOp) []string {
	names := make([]string, len(ops))
	for i, op := range ops {
		names[i] = op.OpName()
	}
	return names
}

// ServerRole is cmd/server's permissions when another process runs the
// worker. Its requests to the worker are an allow list too: the operations
// of ServerConfigOps, hydration pages, sync and the parts of large replies,
// and analytics queries. Its JetStream access is an allow list: it may make (never update,
// purge or delete) the two streams and its KV buckets, read stream info, and
// read, write and watch its buckets. Making or updating other streams is
// denied because a stream can republish what it stores onto any subject,
// the worker's included.
func ServerRole() Role {
	var pub []string
	for _, op := range ServerConfigOps {
		pub = append(pub, ConfigPrefix+"."+op)
	}
	pub = append(pub,
		PartSubject,
		BucketsSubject,
		SyncSubject,
		AnalyticsPrefix+".>",
		stateSubjects,
		counterSubjects,
		quotaSubjects,
		"sluice.cluster.>",
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO.*",
		"$JS.API.STREAM.CREATE."+StateStream,
		"$JS.API.STREAM.CREATE."+CounterStream,
		"$JS.API.STREAM.CREATE."+QuotaStream,
	)
	for _, b := range []string{OwnersBucket, MembersBucket, RevokedSessionsBucket} {
		stream := "KV_" + b
		pub = append(pub,
			"$JS.API.STREAM.CREATE."+stream,
			"$JS.API.STREAM.MSG.GET."+stream,
			"$JS.API.DIRECT.GET."+stream,
			"$JS.API.DIRECT.GET."+stream+".>",
			"$JS.API.CONSUMER.*."+stream,      // CREATE.<stream>
			"$JS.API.CONSUMER.*."+stream+".>", // CREATE, DELETE, INFO of its watchers
			"$KV."+b+".>",
		)
	}
	pub = append(pub, "$JS.ACK.>", "$JS.FC.>")
	return Role{
		Name:         "server",
		PublishAllow: pub,
		PublishDeny:  []string{ConfigPrefix + ".operator.>"}, // the operator bootstrap is the worker's alone
		SubscribeAllow: []string{
			ChangesSubject,
			"sluice.cluster.>",
			"_INBOX.>",
		},
	}
}

func (r Role) permissions() *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: r.PublishAllow, Deny: r.PublishDeny},
		Subscribe: &server.SubjectPermission{Allow: r.SubscribeAllow},
		// What allow_responses: true means in a nats-server config.
		Response: &server.ResponsePermission{MaxMsgs: server.DEFAULT_ALLOW_RESPONSE_MAX_MSGS, Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION},
	}
}

// RoleKeys are the nkey seed files an embedded NATS with a listener trusts,
// one per role, kept in the data directory.
type RoleKeys struct {
	WorkerSeedFile string
	ServerSeedFile string
	workerPublic   string
	serverPublic   string
}

// Seed file names in the data directory.
const (
	WorkerSeedName = "nats-worker.nk"
	ServerSeedName = "nats-server.nk"
)

// EnsureRoleKeys reads the role seed files in dir, making any that is
// missing (mode 0600). They are the only credentials the embedded NATS
// accepts, so they persist across restarts and an external worker can be
// given its file.
func EnsureRoleKeys(dir string) (RoleKeys, error) {
	var rk RoleKeys
	for _, k := range []struct {
		name      string
		file, pub *string
	}{
		{WorkerSeedName, &rk.WorkerSeedFile, &rk.workerPublic},
		{ServerSeedName, &rk.ServerSeedFile, &rk.serverPublic},
	} {
		path := filepath.Join(dir, k.name)
		pub, err := ensureSeed(path)
		if err != nil {
			return RoleKeys{}, err
		}
		*k.file, *k.pub = path, pub
	}
	return rk, nil
}

func ensureSeed(path string) (string, error) {
	seed, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return "", err
		}
		if seed, err = kp.Seed(); err != nil {
			return "", err
		}
		// Written whole under another name first, so a worker started
		// beside this server never reads half a seed.
		tmp := path + ".tmp"
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return "", err
		}
		_, werr := f.Write(append(seed, '\n'))
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			return "", err
		}
		if err := os.Rename(tmp, path); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	kp, err := nkeys.ParseDecoratedNKey(seed)
	if err != nil {
		return "", fmt.Errorf("nats seed %s: %w", path, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return "", fmt.Errorf("nats seed %s: %w", path, err)
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return "", fmt.Errorf("nats seed %s: not a user seed", path)
	}
	return pub, nil
}

func (rk RoleKeys) users() []*server.NkeyUser {
	return []*server.NkeyUser{
		{Nkey: rk.workerPublic, Permissions: WorkerRole().permissions()},
		{Nkey: rk.serverPublic, Permissions: ServerRole().permissions()},
	}
}
