#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/seed-*: a few valid inputs per target.

Usage: python3 fuzz/gen-seeds.py   (needs the `openssl` CLI for the CSR of the join seeds)

The seeds are committed; rerun this after a wire format changes. Deterministic except for the
Ed25519 key behind the CSR. Inputs a fuzzer found (crashes, regressions) are kept next to the
seeds as crash-* / regression-* and are not touched here.
"""
import hashlib, json, os, random, subprocess, tempfile, urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
TOK = "6c007a14875d53d9bf0ef5a6fc0257c8"
PIN = "ab" * 32
CLUSTER = "00112233445566ff"


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def j(v):
    return json.dumps(v, separators=(",", ":"))


def form(s):
    return urllib.parse.quote(s, safe="-_.~")


def record(initiator="a1", state="open", peers=("10.0.0.1:7000",)):
    r = {"cluster_id": "0123456789abcdef", "ca_pin": "c" * 64, "initiator": initiator, "state": state}
    if peers:
        r["peers"] = list(peers)
    return j(r)


def meta(name="n1"):
    return j({"name": name, "key_fingerprint": "f" * 64})


def csr():
    """An Ed25519 CSR and the SHA-256 of its key's SubjectPublicKeyInfo."""
    with tempfile.TemporaryDirectory() as t:
        key, req = os.path.join(t, "k.pem"), os.path.join(t, "r.pem")
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", key], check=True)
        subprocess.run(["openssl", "req", "-new", "-key", key, "-subj", "/CN=n2", "-out", req], check=True)
        spki = subprocess.run(["openssl", "pkey", "-in", key, "-pubout", "-outform", "DER"],
                              check=True, capture_output=True).stdout
        return open(req).read(), hashlib.sha256(spki).hexdigest()


# secret_token
write("secret_token", "join", f"K1.{PIN}.{'0123456789abcdef'}.{'5e' * 32}\n")
write("secret_token", "operator", f"OP1.{PIN}.{'fedcba9876543210'}.{'a7' * 32}")
write("secret_token", "near-miss", f"K1.{PIN}.0123456789abcdeF.{'5e' * 32}")
write("secret_token", "compare", "abc\nabd")

# bootstrap_record
write("bootstrap_record", "record", record())
write("bootstrap_record", "update", record() + "\n" + record(state="formed", peers=("10.0.0.1:7000", "[::1]:7001")))
write("bootstrap_record", "regression", record(state="formed") + "\n" + record(state="open"))
write("bootstrap_record", "meta", meta())

# discovery_path
write("discovery_path", "member", f"/{TOK}/858e6d970cdc98d7\nn1=http://10.0.0.1:2380")
write("discovery_path", "registry", f"/v2/keys/_etcd/registry/{TOK}/_muster/record\n" + record())
write("discovery_path", "meta", f"/{TOK}/_muster/nodes/a1/\nmp=http://127.0.0.1:1,mp=https://[::1]:2")
write("discovery_path", "config", f"/{TOK}/_config/size\nn 1=unix://h:1/")

# discovery_http: first byte = size selector, then one request per line
lines = [
    "P~/a1?prevExist=false value=" + form("n1=http://10.0.0.1:2380"),
    "P~/b2?prevExist=false value=" + form("n2=http://10.0.0.2:2380"),
    "P~/_muster/nodes/a1?prevExist=false value=" + form(meta()),
    "P~/_muster/record?prevExist=false value=" + form(record()),
    "P~/_muster/record?prevIndex=5 value=" + form(record(state="formed")),
    "G~?recursive=true&sorted=true",
    "G~?wait=true&waitIndex=2&recursive=true",
    "W~",
    "G~/a1?quorum=true",
]
write("discovery_http", "formation", b"\x02" + "\n".join(lines).encode())
write("discovery_http", "etcd", b"\x00" + "\n".join([
    "p/v2/keys/_etcd/registry/" + TOK + "/858e6d970cdc98d7?prevExist=false&value=" + form("n1=http://h:1"),
    "G~/858e6d970cdc98d7",
    "G~?wait=true&recursive=true",
    "D~/a1",
    "j~/a1 {}",
]).encode())
write("discovery_http", "new", b"\x01" + "\n".join([
    "N/new size=3",
    "G/new?size=0",
    "G/00000000000000000000000000000001",
    "W/00000000000000000000000000000001",
    "G/health",
    "G/metrics",
    "W/",
]).encode())
write("discovery_http", "markup", b"\x02" + "\n".join([
    "P~/a1?prevExist=false value=" + form("<b>&'\"=http://<i>:1"),
    "W~",
]).encode())

# discovery_model: arbitrary-shaped bytes
rng = random.Random(7)
for i in range(3):
    write("discovery_model", f"random-{i}", bytes(rng.randrange(256) for _ in range(96)))

# backup_file
state = {
    "cluster_id": "c1",
    "ca": {"cert_pem": "cert", "key_pem": "key"},
    "nodes": {"7": {"name": "n1", "addr": "10.0.0.1:7000", "key_fingerprint": "f" * 64, "joined_ms": 1}},
    "kv": {"k": "v"},
    "join_tokens": {"t": {"secret_sha256": "h", "description": "", "created_ms": 1, "expires_ms": 2 ** 64 - 1,
                          "uses_total": 1, "uses_left": 1, "consumed_ms": None, "revoked_ms": None,
                          "last_used_by": None}},
    "operator_tokens": {"o": {"secret_sha256": "x", "description": "ops", "created_ms": 3, "revoked_ms": None}},
    "removed": [9],
    "forced_removals": [9],
}


def backup(state, cluster_id="c1"):
    payload = j(state).encode()
    header = {"format": "muster-backup", "version": 1, "cluster_id": cluster_id, "created_ms": 5,
              "applied_index": 42, "members": len(state["nodes"]), "keys": len(state["kv"]),
              "payload_bytes": len(payload), "payload_sha256": hashlib.sha256(payload).hexdigest()}
    return j(header).encode() + b"\n" + payload


# First byte: 0 = a whole file, 1 = a payload the target puts behind a matching header.
write("backup_file", "full", b"\x00" + backup(state))
write("backup_file", "minimal", b"\x00" + backup({"cluster_id": "c2", "ca": {"cert_pem": "", "key_pem": ""},
                                                  "nodes": {}, "kv": {}}, "c2"))
write("backup_file", "bad-sum", b"\x00" + backup(state)[:-2] + b"}}")
write("backup_file", "payload", b"\x01" + j(state).encode())

# raft_rpc: selector byte (0 append, 1 vote, 2 snapshot), then the JSON body
lid = lambda term, node, index: {"leader_id": {"term": term, "node_id": node}, "index": index}
vote = {"leader_id": {"term": 3, "node_id": 161}, "committed": True}
node = {"name": "n1", "addr": "10.0.0.1:7000", "key_fingerprint": "f" * 64, "joined_ms": 1}
membership = {"configs": [[161, 178]], "nodes": {"161": {"name": "n1", "addr": "10.0.0.1:7000"},
                                                 "178": {"name": "n2", "addr": "10.0.0.2:7000"}}}
entries = [
    {"log_id": lid(3, 161, 1), "payload": "Blank"},
    {"log_id": lid(3, 161, 2), "payload": {"Normal": {"op": "init_cluster", "cluster_id": CLUSTER,
                                                      "ca": {"cert_pem": "c", "key_pem": "k"}}}},
    {"log_id": lid(3, 161, 3), "payload": {"Membership": membership}},
    {"log_id": lid(3, 161, 4), "payload": {"Normal": {"op": "upsert_node", "id": 161, "node": node}}},
    {"log_id": lid(3, 161, 5), "payload": {"Normal": {"op": "kv_put", "key": "k", "value": "v"}}},
    {"log_id": lid(3, 161, 6), "payload": {"Normal": {"op": "create_join_token", "id": "t1", "token": {
        "secret_sha256": "h", "created_ms": 1, "expires_ms": 9, "uses_total": 1, "uses_left": 1}}}},
    {"log_id": lid(3, 161, 7), "payload": {"Normal": {"op": "admit_with_token", "token_id": "t1",
                                                      "secret_sha256": "h", "now_ms": 2, "id": 178,
                                                      "node": dict(node, name="n2")}}},
    {"log_id": lid(3, 161, 8), "payload": {"Normal": {"op": "remove_node", "id": 178, "force": True}}},
    {"log_id": lid(3, 161, 9), "payload": {"Normal": {"op": "kv_del", "key": "k"}}},
]
write("raft_rpc", "append", b"\x00" + j({"vote": vote, "prev_log_id": lid(2, 161, 0), "entries": entries,
                                         "leader_commit": lid(3, 161, 5)}).encode())
write("raft_rpc", "heartbeat", b"\x00" + j({"vote": vote, "prev_log_id": None, "entries": [],
                                            "leader_commit": None}).encode())
# A restored state has no members (backup_file::restored_state): integer map keys (`nodes`) do
# not deserialize inside the internally tagged `Request` (serde buffers them as strings).
write("raft_rpc", "restore", b"\x00" + j({"vote": vote, "prev_log_id": None, "leader_commit": None, "entries": [
    {"log_id": lid(1, 1, 1), "payload": {"Normal": {"op": "restore_state", "state": dict(state, nodes={})}}}]}).encode())
write("raft_rpc", "vote", b"\x01" + j({"vote": {"leader_id": {"term": 4, "node_id": 178}, "committed": False},
                                        "last_log_id": lid(3, 161, 9)}).encode())
write("raft_rpc", "snapshot", b"\x02" + j({"vote": vote, "meta": {
    "last_log_id": lid(3, 161, 9), "last_membership": {"log_id": lid(3, 161, 3), "membership": membership},
    "snapshot_id": "3-161-9-1"}, "offset": 0, "data": list(b'{"version":1}'), "done": True}).encode())

# peer_join and leader_op (the secret and token ids match fuzz_targets/admission.rs)
csr_pem, fingerprint = csr()
token_join = {"token_id": "0000000000000001", "secret": "fuzz-secret", "node_id": "b2", "name": "n2",
              "addr": "10.0.0.2:7000", "key_fingerprint": fingerprint, "csr_pem": csr_pem}
write("peer_join", "token-join", b"\x01" + j(token_join).encode())
write("peer_join", "token-join-used-up", b"\x01" + j(dict(token_join, token_id="0000000000000002")).encode())
write("peer_join", "member-retry", b"\x01" + j(dict(token_join, node_id="a1", key_fingerprint="f" * 64)).encode())
write("peer_join", "registrant", b"\x00" + j({"discovery_url": f"http://127.0.0.1:2379/{TOK}/", "member_id": "a1",
                                              "name": "n1", "addr": "10.0.0.1:7000", "csr_pem": csr_pem}).encode())

join = dict(token_join, secret_sha256=hashlib.sha256(b"fuzz-secret").hexdigest())
del join["secret"]
write("leader_op", "token-join", j({"op": "token_join", "join": join}))
write("leader_op", "kv-put", j({"op": "write", "request": {"op": "kv_put", "key": "k", "value": "v"}}))
write("leader_op", "kv-del", j({"op": "write", "request": {"op": "kv_del", "key": "k"}}))
write("leader_op", "not-forwardable", j({"op": "write", "request": entries[3]["payload"]["Normal"]}))
write("leader_op", "create-token", j({"op": "create_join_token", "create": {
    "id": "0123456789abcdef", "secret_sha256": "0" * 64, "ttl_ms": 3600000, "uses": 1, "description": "x"}}))
write("leader_op", "remove", j({"op": "remove_node", "name": "n1", "force": False}))
write("leader_op", "status", j({"op": "status"}))
# A FleetLock group with maintenance windows: each window is parsed from its text and written
# back (state/fleetlock_window.rs), so the round trip checks the window parser too.
write("leader_op", "fleetlock-windows", j({"op": "fleet_lock", "command": {
    "fleetlock": "set_group", "name": "workers", "slots": 2,
    "windows": ["Sat 02:00-06:00 UTC", "mon-fri 22:00-02:00 UTC", "daily 00:00-24:00 UTC"]}}))
# A FleetLock group with health gates: only gate names travel (what a gate runs is each agent's
# own setting), so the round trip reaches the group's gate list and its bounds.
write("leader_op", "fleetlock-gates", j({"op": "fleet_lock", "command": {
    "fleetlock": "set_group", "name": "workers", "slots": 2,
    "windows": ["Sat 02:00-06:00 UTC"], "gates": ["alerts", "drained"]}}))

# discovery_grpc: selector byte (0 Range, 1 Put, 2 Watch), then one gRPC frame of the message
def pb_varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb_bytes(field, data):
    data = data.encode() if isinstance(data, str) else data
    return pb_varint(field << 3 | 2) + pb_varint(len(data)) + data


def pb_int(field, n):
    return pb_varint(field << 3) + pb_varint(n)


def grpc_frame(message):
    return b"\x00" + len(message).to_bytes(4, "big") + message


REG = f"/_etcd/registry/{TOK}"
write("discovery_grpc", "range-size", b"\x00" + grpc_frame(pb_bytes(1, f"{REG}/_config/size")))
write("discovery_grpc", "range-members", b"\x00" + grpc_frame(pb_bytes(1, f"{REG}/members") + pb_bytes(2, f"{REG}/membert")))
write("discovery_grpc", "put-size", b"\x01" + grpc_frame(pb_bytes(1, f"{REG}/_config/size") + pb_bytes(2, "3")))
write("discovery_grpc", "put-member", b"\x01" + grpc_frame(pb_bytes(1, f"{REG}/members/8e9e05c52164694d") + pb_bytes(2, "n1=http://10.0.0.1:2380")))
write("discovery_grpc", "put-outside", b"\x01" + grpc_frame(pb_bytes(1, "/foo") + pb_bytes(2, "bar")))
write("discovery_grpc", "watch-create", b"\x02" + grpc_frame(pb_bytes(1, pb_bytes(1, f"{REG}/members") + pb_bytes(2, f"{REG}/membert") + pb_int(3, 5))))
write("discovery_grpc", "too-large", b"\x01\x00\x00\x01\x00\x01")
