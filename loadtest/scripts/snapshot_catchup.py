#!/usr/bin/env python3
"""Large snapshot transfer (issue 4), standard library only.

Usage: snapshot_catchup.py BATON_BIN N

Starts a 3-node cluster on 127.0.0.1:47900-47921 (snapshot every 2,000 entries),
stops one follower, acquires N locks through the leader, restarts the follower and
waits until it holds the same N locks, which it can only get by snapshot (the log
behind the snapshots is purged). Prints timings, sizes and snapshots installed.
"""
import http.client, json, os, shutil, subprocess, sys, tempfile, threading, time

B = sys.argv[1]; N = int(sys.argv[2]); PER = 100_000
D = tempfile.mkdtemp(prefix="bigsnap-")
api = {1: 47900, 2: 47910, 3: 47920}; raft = {i: p + 1 for i, p in api.items()}
peers = ",".join(f"{i}=http://127.0.0.1:{raft[i]}" for i in api)
procs = {}
def start(i):
    procs[i] = subprocess.Popen([B, "serve", "--node-id", str(i), "--listen", f"127.0.0.1:{api[i]}",
        "--raft-listen", f"127.0.0.1:{raft[i]}", "--data-dir", f"{D}/n{i}", "--peers", peers,
        "--cluster-secret", "s", "--insecure-plaintext-peers", "--snapshot-every", "2000", "--max-holdings-per-lease", str(PER)],
        stdout=subprocess.DEVNULL, stderr=open(f"{D}/log{i}", "a"), env={**os.environ, "BATON_LOG": "warn"})
def req(port, method, path, body=None, conn=None):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request(method, path, body=json.dumps(body) if body is not None else None)
    r = c.getresponse(); data = r.read()
    return r.status, (json.loads(data) if data else None)
def wait_ready(i, t=60):
    end = time.time() + t
    while time.time() < end:
        try:
            if req(api[i], "GET", "/readyz")[0] == 200: return True
        except Exception: pass
        time.sleep(0.1)
    return False
def metric(i, name):
    c = http.client.HTTPConnection("127.0.0.1", api[i], timeout=10); c.request("GET", "/metrics")
    for line in c.getresponse().read().decode().splitlines():
        if line.startswith(name + " "): return float(line.split()[1])
try:
    for i in api: start(i)
    assert all(wait_ready(i) for i in api)
    leader = req(api[1], "GET", "/v1/cluster")[1]["leader_id"]
    down = next(i for i in (3, 2, 1) if i != leader)
    procs[down].kill(); procs[down].wait()
    port = api[leader]
    leases = [req(port, "POST", "/v1/leases", {"ttl_ms": 3_600_000})[1]["lease_id"] for _ in range((N + PER - 1) // PER)]
    nxt = [0]; lock = threading.Lock(); fails = [0]
    def worker():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while True:
            with lock:
                k = nxt[0]; nxt[0] += 1
            if k >= N: return
            s, _ = req(port, "POST", f"/v1/locks/big-{k:08d}:acquire", {"lease_id": leases[k // PER]}, c)
            if s != 200: fails[0] += 1
    t0 = time.time(); ts = [threading.Thread(target=worker) for _ in range(48)]
    [t.start() for t in ts]; [t.join() for t in ts]
    print(f"acquired {N} locks in {time.time()-t0:.1f}s, failures {fails[0]}", flush=True)
    held = metric(leader, "baton_locks_held"); print("leader locks held", held)
    snapdir = f"{D}/n{leader}"; size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(snapdir) for f in fs)
    print(f"leader data dir {size/1e6:.1f} MB")
    t1 = time.time(); start(down)
    while True:
        try:
            h = metric(down, "baton_locks_held"); s = metric(down, "baton_snapshots_installed")
            if h == held: break
        except Exception: pass
        if time.time() - t1 > 300: print("TIMEOUT"); break
        time.sleep(0.2)
    print(f"node {down} caught up: locks {metric(down,'baton_locks_held')}, snapshots installed {metric(down,'baton_snapshots_installed')}, in {time.time()-t1:.1f}s")
finally:
    for p in procs.values():
        p.kill()
    shutil.rmtree(D, ignore_errors=True)
