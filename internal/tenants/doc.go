// Package tenants holds Sluice's configuration domain: tenants, dashboard
// users, service and consumer keys, policies, blocks and webhooks, with
// their validation, key and password hashing, the audit log, and the
// SQLite store the worker writes them with.
//
// Only the worker opens SQLite. Servers receive a Snapshot over NATS when
// they start and then apply the Changes the worker announces after each
// committed write, so every type here round-trips through encoding/json
// without loss. API-facing types never marshal a secret or a hash; the
// *Record types in snapshot.go are the internal shapes that do carry key
// hashes, because servers need them to verify keys.
//
// Store holds the database handle and what every write shares: the one
// writer (a semaphore every write transaction takes), the config version,
// the caps, the password gate and the webhook sealer. Its own methods are
// what spans aggregates (Snapshot, ConfigVersion, WriteTx, Exclusive, the
// settings); it hands out one small store per aggregate, each with one
// job:
//
//   - TenantStore (Store.Tenants): creates tenants with their owner and
//     first service key, suspends, resumes and deletes them.
//   - ServiceKeyStore (Store.ServiceKeys): issues and revokes a tenant's
//     service keys and records when servers saw them.
//   - UserStore (Store.Users): a tenant's dashboard logins, their
//     passwords, emails, roles and sessions.
//   - OperatorStore (Store.Operator): the platform operator's login and
//     token as configured at start.
//   - SetupStore (Store.Setup): the first-run setup link that creates the
//     operator login.
//   - KeyStore (Store.Keys): a tenant's consumer keys, and the pages,
//     names and counts the dashboard reads of them.
//   - PolicyStore (Store.Policies): a tenant's policies, their names, and
//     the bucket resets that name them.
//   - CustomerStore (Store.Customers): a tenant's customers, and which
//     customer each consumer key belongs to is checked against it.
//   - BlockStore (Store.Blocks): the operator's blocks of identities.
//   - WebhookStore (Store.Webhooks): a tenant's endpoints, their secrets,
//     and the deliveries the tenant sees and resends.
//   - Outbox (Store.Outbox): writes the events endpoints are sent, within
//     each tenant's bounds.
//   - DeliveryQueue (Store.DeliveryQueue): what the delivery loop
//     (internal/worker/webhook) reads and records: due queues, their
//     heads, attempts, and the pruning of what was sent.
//   - AuditLog (Store.Audit): reads and prunes the audit log every write
//     records into.
//
// The small stores share the Store's core, so a write through any of them
// takes the same writer and moves the same config version. The delivery
// queue stays here rather than beside the delivery loop: the enqueue side
// (config writes, quota crossings, the outbox's bounds) and the loop keep
// the same webhook_queues rows due together (webhooks.go), and the loop's
// writes take the store's one writer.
package tenants
