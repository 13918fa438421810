// Baton's real flows through a TypeScript client: types generated from
// openapi/baton.json by openapi-typescript, requests sent by openapi-fetch.
//
// `make test-clients` (openapi/clients/test_clients.py) generates the types into a
// temporary folder (imported here as "baton-api", see tsconfig.json's `paths`),
// type-checks this file with `tsc --noEmit`, compiles it and runs it with Node
// against a `baton serve` it started:
//
//     node flows.js --endpoint http://127.0.0.1:PORT     (or BATON_ENDPOINT)
//
// Every request the spec describes goes through the typed client; only the
// Server-Sent Events stream of `:observe` is read with fetch and a ReadableStream
// (openapi-fetch does not parse `text/event-stream`). Each step is checked; the
// first failure throws and the exit status is non-zero.

import createClient from "openapi-fetch";
import type { components, paths } from "baton-api";

type Problem = components["schemas"]["Problem"];

function endpointArgument(): string {
  const at = process.argv.indexOf("--endpoint");
  if (at >= 0 && process.argv[at + 1]) return process.argv[at + 1];
  return process.env.BATON_ENDPOINT ?? "http://127.0.0.1:7878";
}

const endpoint = endpointArgument();
const baton = createClient<paths>({ baseUrl: endpoint });

// A name with `/` in it: openapi-fetch percent-encodes path parameters
// (encodeURIComponent, so `%2F`), which the server reads as the same name.
const LOCK = "team-a/typescript/db/migrate";
const ELECTION = "team-a/typescript/primary";
const NAME = "svc/typescript/payments";

function step(text: string): void {
  console.log(`typescript flows: ${text}`);
}

function check(condition: unknown, what: string, detail?: unknown): asserts condition {
  if (!condition) {
    throw new Error(`check failed: ${what}${detail === undefined ? "" : `: ${JSON.stringify(detail)}`}`);
  }
}

/** The body of a successful answer with this status (openapi-fetch: `data`). */
function ok<T>(result: { data?: T; error?: unknown; response: Response }, status: number): T {
  check(result.response.status === status && result.data !== undefined,
    `wanted ${status}, got ${result.response.status}`, result.error);
  return result.data;
}

/** The typed problem of an error answer with this status and code (openapi-fetch: `error`). */
function problem(result: { error?: Problem; response: Response }, status: number, code: string): Problem {
  check(result.response.status === status && result.error !== undefined,
    `wanted a ${status} problem, got ${result.response.status}`);
  const error: Problem = result.error;
  check(error.code === code, `wanted code ${code}`, error);
  check(result.response.headers.get("content-type")?.startsWith("application/problem+json"),
    "problem content type", result.response.headers.get("content-type"));
  return error;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function leasesAndLocks(): Promise<void> {
  step("create two leases");
  const mine = ok(await baton.POST("/v1/leases", { body: { ttl_ms: 20000, holder: "ts-worker" } }), 201);
  const other = ok(await baton.POST("/v1/leases", { body: { ttl_ms: 20000, holder: "ts-other" } }), 201);
  check(mine.holder === "ts-worker" && mine.lease_id !== other.lease_id, "two leases", mine);

  step(`the other lease acquires ${LOCK}`);
  const lock = { params: { path: { name: LOCK } } };
  const first = ok(await baton.POST("/v1/locks/{name}:acquire", { ...lock, body: { lease_id: other.lease_id } }), 200);
  check(first.name === LOCK && first.holder === "ts-other", "first grant", first);

  step("a second acquire without waiting: 409 lock_held, read as a typed Problem");
  const held = problem(await baton.POST("/v1/locks/{name}:acquire",
    { ...lock, body: { lease_id: mine.lease_id, wait_ms: 0 } }), 409, "lock_held");
  check(held.holder === "ts-other" && held.token === first.token, "lock_held names the holder", held);

  step("acquire with wait_ms while the other holder releases shortly after");
  const started = Date.now();
  const waiting = baton.POST("/v1/locks/{name}:acquire",
    { ...lock, body: { lease_id: mine.lease_id, holder: "ts-waiter", wait_ms: 15000 } })
    .then((result) => ({ result, waited: Date.now() - started }));
  for (const deadline = Date.now() + 10000; ;) {
    const info = ok(await baton.GET("/v1/locks/{name}", lock), 200);
    if (info.waiters === 1) {
      check(info.queue[0] === "ts-waiter" && info.holder === "ts-other", "one waiter in line", info);
      break;
    }
    check(Date.now() < deadline, "the waiter queued", info);
    await sleep(50);
  }
  await sleep(300);
  const released = ok(await baton.POST("/v1/locks/{name}:release",
    { ...lock, body: { lease_id: other.lease_id, token: first.token } }), 200);
  check(released.released, "released", released);
  const { result, waited } = await waiting;
  const grant = ok(result, 200);
  check(waited >= 300, "the acquire waited for the release", waited);
  check(grant.lease_id === mine.lease_id && grant.holder === "ts-waiter" && grant.token > first.token,
    "the waiter's grant", grant);

  step("the fencing token in the body and in the Baton-Fencing-Token header agree");
  check(Number(result.response.headers.get("Baton-Fencing-Token")) === grant.token,
    "Baton-Fencing-Token header", result.response.headers.get("Baton-Fencing-Token"));
  check(Number(result.response.headers.get("Baton-Revision")) >= grant.revision, "Baton-Revision header");

  step("renew, validate, list, release");
  const holding = { lease_id: mine.lease_id, token: grant.token };
  const renewed = ok(await baton.POST("/v1/locks/{name}:renew", { ...lock, body: holding }), 200);
  check(renewed.token === grant.token && renewed.name === LOCK, "renewed", renewed);
  const valid = ok(await baton.POST("/v1/locks/{name}:validate", { ...lock, body: { token: grant.token } }), 200);
  check(valid.valid === true && valid.current_token === grant.token, "valid", valid);
  const stale = ok(await baton.POST("/v1/locks/{name}:validate", { ...lock, body: { token: first.token } }), 200);
  check(stale.valid === false && stale.current_token === grant.token, "the old token is stale", stale);
  const page = ok(await baton.GET("/v1/locks", { params: { query: { prefix: "team-a/typescript/" } } }), 200);
  check(page.items.length === 1 && page.items[0].name === LOCK, "listed by prefix", page);
  ok(await baton.POST("/v1/locks/{name}:release", { ...lock, body: holding }), 200);
  const after = ok(await baton.POST("/v1/locks/{name}:validate", { ...lock, body: { token: grant.token } }), 200);
  check(after.valid === false, "invalid after release", after);
  problem(await baton.POST("/v1/locks/{name}:release", { ...lock, body: holding }), 409, "lock_lost");

  for (const lease of [mine, other]) {
    ok(await baton.DELETE("/v1/leases/{lease_id}", { params: { path: { lease_id: lease.lease_id } } }), 200);
  }
  problem(await baton.GET("/v1/leases/{lease_id}", { params: { path: { lease_id: mine.lease_id } } }),
    404, "lease_not_found");
}

type SseEvent = { id: string; event: string; data: any };

/** Server-Sent Events of a fetch response, parsed from its ReadableStream. */
async function* sseEvents(response: Response): AsyncGenerator<SseEvent> {
  check(response.body, "an event stream body");
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const fields: Record<string, string> = {};
      for (const line of frame.split("\n")) {
        if (line === "" || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const key = colon < 0 ? line : line.slice(0, colon);
        let text = colon < 0 ? "" : line.slice(colon + 1);
        if (text.startsWith(" ")) text = text.slice(1);
        fields[key] = key === "data" && key in fields ? `${fields[key]}\n${text}` : text;
      }
      if ("data" in fields) {
        yield { id: fields.id ?? "", event: fields.event ?? "message", data: JSON.parse(fields.data) };
      }
    }
  }
}

async function elections(): Promise<void> {
  step(`campaign in ${ELECTION}`);
  const election = { params: { path: { name: ELECTION } } };
  const alpha = ok(await baton.POST("/v1/elections/{name}:campaign",
    { ...election, body: { candidate: "ts-alpha", value: { addr: "10.0.0.7:5432" }, ttl_ms: 20000 } }), 200);
  check(alpha.leader, "elected", alpha);
  const now = await baton.GET("/v1/elections/{name}", election);
  const info = ok(now, 200);
  check(info.leader.candidate === "ts-alpha" && info.leader.token === alpha.token, "leader", info);
  const revision = now.response.headers.get("Baton-Revision");
  check(revision, "Baton-Revision header");

  step("another candidate that will not wait: 409 not_elected, the typed Problem names the leader");
  const gamma = ok(await baton.POST("/v1/leases", { body: { ttl_ms: 20000, holder: "ts-gamma" } }), 201);
  const lost = problem(await baton.POST("/v1/elections/{name}:campaign", {
    ...election, body: { candidate: "ts-gamma", value: null, lease_id: gamma.lease_id, wait_ms: 0 },
  }), 409, "not_elected");
  check(lost.leader === "ts-alpha", "not_elected names the leader", lost);
  ok(await baton.DELETE("/v1/leases/{lease_id}", { params: { path: { lease_id: gamma.lease_id } } }), 200);

  step("observe it over SSE (fetch + ReadableStream) from the election's Baton-Revision");
  const abort = new AbortController();
  const url = `${endpoint}/v1/elections/${encodeURIComponent(ELECTION)}:observe?since=${revision}&bookmark_ms=200`;
  const stream = await fetch(url, { signal: abort.signal, headers: { Accept: "text/event-stream" } });
  check(stream.status === 200 && stream.headers.get("content-type")?.startsWith("text/event-stream"),
    "an event stream", stream.status);
  const seen: SseEvent[] = [];
  const observed = (async () => {
    for await (const event of sseEvents(stream)) {
      if (event.event.startsWith("election.")) seen.push(event);
      if (event.event === "election.elected" && event.data.candidate === "ts-beta") return;
    }
  })();

  step("a second candidate waits in line; the leader resigns; the stream shows the change");
  const standing = baton.POST("/v1/elections/{name}:campaign", {
    ...election,
    body: { candidate: "ts-beta", value: { addr: "10.0.0.8:5432" }, ttl_ms: 20000, wait_ms: 15000 },
  });
  for (const deadline = Date.now() + 10000; ;) {
    const current = ok(await baton.GET("/v1/elections/{name}", election), 200);
    if (current.candidates >= 1) break;
    check(Date.now() < deadline, "the second candidate queued", current);
    await sleep(50);
  }
  const resigned = ok(await baton.POST("/v1/elections/{name}:resign",
    { ...election, body: { lease_id: alpha.lease_id, token: alpha.token } }), 200);
  check(resigned.resigned, "resigned", resigned);
  const beta = ok(await standing, 200);
  check(beta.token > alpha.token, "the next candidate leads", beta);
  const timeout = setTimeout(() => abort.abort(), 10000);
  await observed;
  clearTimeout(timeout);
  abort.abort();
  check(seen.map((e) => e.event).join(",") === "election.resigned,election.elected", "leader change events", seen);
  check(seen[1].data.token === beta.token && seen[1].data.value.addr === "10.0.0.8:5432", "the new leader", seen);
  const later = ok(await baton.GET("/v1/elections/{name}", election), 200);
  check(later.leader.candidate === "ts-beta" && later.leader.token === beta.token, "leader after", later);
  ok(await baton.POST("/v1/elections/{name}:resign",
    { ...election, body: { lease_id: beta.lease_id, token: beta.token } }), 200);
}

async function names(): Promise<void> {
  step(`register ${NAME} and look it up`);
  const name = { params: { path: { name: NAME } } };
  const lease = ok(await baton.POST("/v1/leases", { body: { ttl_ms: 20000, holder: "ts-payments" } }), 201);
  const value = { addr: "10.0.0.9:8080", weight: 3 };
  const registered = ok(await baton.PUT("/v1/names/{name}", { ...name, body: { value, lease_id: lease.lease_id } }), 201);
  check(registered.name === NAME, "registered", registered);
  const found = ok(await baton.GET("/v1/names/{name}", name), 200);
  check(JSON.stringify(found.value) === JSON.stringify(value) && found.holder === "ts-payments"
    && found.token === registered.token, "looked up", found);
  const taken = problem(await baton.PUT("/v1/names/{name}",
    { ...name, body: { value: { addr: "10.0.0.10:8080" }, ttl_ms: 5000 } }), 409, "name_taken");
  check(taken.holder === "ts-payments", "name_taken names the owner", taken);
  ok(await baton.DELETE("/v1/leases/{lease_id}", { params: { path: { lease_id: lease.lease_id } } }), 200);
  problem(await baton.GET("/v1/names/{name}", name), 404, "not_found");
}

async function idempotency(): Promise<void> {
  step("an Idempotency-Key retry: the same key and body answer the same lease and grant");
  const key = { header: { "Idempotency-Key": `ts-${crypto.randomUUID()}` } };
  const body = { ttl_ms: 20000, holder: "ts-retry" };
  const first = await baton.POST("/v1/leases", { params: key, body });
  const again = await baton.POST("/v1/leases", { params: key, body });
  const lease = ok(first, 201);
  check(ok(again, 201).lease_id === lease.lease_id, "the same lease", again.data);
  check(again.response.headers.get("Idempotent-Replayed") === "true", "replayed");
  check(first.response.headers.get("Idempotent-Replayed") === null, "first not replayed");

  const acquireKey = `ts-${crypto.randomUUID()}`;
  const acquire = {
    params: { path: { name: LOCK }, header: { "Idempotency-Key": acquireKey } },
    body: { lease_id: lease.lease_id },
  };
  const grant = ok(await baton.POST("/v1/locks/{name}:acquire", acquire), 200);
  const retried = await baton.POST("/v1/locks/{name}:acquire", acquire);
  check(ok(retried, 200).token === grant.token, "the same grant", retried.data);
  check(Number(retried.response.headers.get("Baton-Fencing-Token")) === grant.token, "the same header token");
  problem(await baton.POST("/v1/locks/{name}:acquire",
    { ...acquire, body: { lease_id: lease.lease_id, wait_ms: 1 } }), 422, "idempotency_key_reused");
  ok(await baton.DELETE("/v1/leases/{lease_id}", { params: { path: { lease_id: lease.lease_id } } }), 200);
}

try {
  await leasesAndLocks();
  await elections();
  await names();
  await idempotency();
  step("all flows passed");
} catch (error) {
  console.error("typescript flows: FAILED:", error);
  process.exit(1);
}
