"""A client's timings against `batchlab serve --timing-log`'s own (plain Python 3, no packages).

The server knows when it handed each token to the socket; a client knows when it sent the request
and when each chunk arrived. All of them are CLOCK_MONOTONIC on one machine: the server's log in ns,
batchlab's requests.jsonl in ns, and vLLM's `bench serve` in seconds of `time.perf_counter()`,
which is CLOCK_MONOTONIC on Linux. So each request's times can be set side by side:

  TTFT   client: first chunk's arrival - the request's send;  server: first token's write - receipt
  ITL k  client: chunk k's arrival - chunk k-1's;             server: token k's write - token k-1's

and the difference (client - server) is what the client adds to, or loses from, what happened.

  bench_http_compare.py vllm SERVER.jsonl RESULT.json PREFIX [LABEL]     -> one JSON line
  bench_http_compare.py batchlab SERVER.jsonl requests.jsonl [LABEL]     -> one JSON line
  bench_http_compare.py table RESULTS.jsonl                              -> markdown rows
  bench_http_compare.py selftest                                         -> checks itself on made-up logs

`vllm`: the file of `vllm bench serve --save-result --save-detailed` (its `start_times`, `ttfts`,
`itls`, `errors`, one per request in its dataset's order) and the `--request-id-prefix` it was
run with: its request i sent `X-Request-Id: PREFIX + i`, which the server logged. The result file
does not hold the ids; its requests are in the dataset's order, which is the order of the ids.

`batchlab`: requests.jsonl's measured, completed records. Each needs `sent_ns` (when its HTTP
request was written) and `token_ns` (when each of its tokens' chunks arrived), ns on
CLOCK_MONOTONIC; the HTTP engine sends `X-Request-Id: [PREFIX-]ID[,ID...]`, the batch's request
ids in choice order (a prefix that starts with `batchlab` and ends with `-` is skipped), so the server's (request_id,
choice) names the record. Without `token_ns`, the
first and last token times (`engine_first_token_ns`, `engine_last_token_ns`) give TTFT per
request and the last-token time, and ITL is not compared; without `sent_ns`, the batch's dispatch
stands in for the send (both say so in the output's `mode`). When no record matches a server line
(no ids sent), only the two TTFT distributions are compared (`mode: "distribution"`).

A server request id seen twice (vLLM's bench sends its first request again as its ready check)
is matched to the logged receipt nearest the client's send.
"""

import json
import math
import os
import sys
import tempfile


def quantile(values, q):
    """Nearest-rank quantile of a non-empty list."""
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(q * len(s)) - 1))]


def summary(diffs_ms):
    """Median (signed), p99 and max of the absolute difference, in ms; None when empty."""
    if not diffs_ms:
        return None
    absolute = [abs(d) for d in diffs_ms]
    return {
        "n": len(diffs_ms),
        "median": quantile(diffs_ms, 0.5),
        "p99_abs": quantile(absolute, 0.99),
        "max_abs": max(absolute),
    }


def read_server(path):
    """(request_id, choice) -> [(received_ns, [token_ns...]), ...]."""
    lines = {}
    with open(path) as f:
        for n, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                r = json.loads(text)
                key = (r["request_id"], int(r["choice"]))
                lines.setdefault(key, []).append((int(r["received_ns"]), [int(t) for t in r["token_ns"]]))
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"{path}:{n}: not a timing-log line ({e}): {text.strip()[:200]}")
    return lines


def nearest(entries, sent_ns):
    return min(entries, key=lambda e: abs(e[0] - sent_ns))


def compare(pairs, client, mode, server_lines, unmatched_client, label):
    """`pairs`: (client sent_ns, client arrivals ns (None: unknown), client first ns, client last
    ns, server received_ns, server token_ns)."""
    ttft, itl, last, lag_first, send_offset = [], [], [], [], []
    gap_mismatch = 0
    for sent, arrivals, first, last_ns, received, tokens in pairs:
        ttft.append(((first - sent) - (tokens[0] - received)) / 1e6)
        lag_first.append((first - tokens[0]) / 1e6)
        send_offset.append((received - sent) / 1e6)
        if last_ns is not None:
            last.append(((last_ns - sent) - (tokens[-1] - received)) / 1e6)
        if arrivals is not None:
            if len(arrivals) != len(tokens):
                gap_mismatch += 1
                continue
            for k in range(1, len(tokens)):
                itl.append(((arrivals[k] - arrivals[k - 1]) - (tokens[k] - tokens[k - 1])) / 1e6)
    return {
        "client": client,
        "label": label,
        "mode": mode,
        "matched": len(pairs),
        "unmatched_client": unmatched_client,
        "server_lines": server_lines,
        "gap_count_mismatch": gap_mismatch,
        "ttft_diff_ms": summary(ttft),
        "itl_diff_ms": summary(itl),
        "last_token_diff_ms": summary(last),
        "first_chunk_lag_ms": summary(lag_first),
        "send_to_receipt_ms": summary(send_offset),
    }


def distribution(client_ttfts_ms, server, client, label, why):
    server_ttfts = [(tokens[0] - received) / 1e6 for entries in server.values() for received, tokens in entries]
    out = {"client": client, "label": label, "mode": "distribution", "why": why, "matched": 0}
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        if client_ttfts_ms and server_ttfts:
            c, s = quantile(client_ttfts_ms, q), quantile(server_ttfts, q)
            out[f"ttft_{name}_ms"] = {"client": c, "server": s, "diff": c - s}
    return out


def vllm(server_path, result_path, prefix, label):
    server = read_server(server_path)
    with open(result_path) as f:
        r = json.load(f)
    missing = [k for k in ("start_times", "ttfts", "itls") if k not in r]
    if missing:
        sys.exit(f"{result_path}: no {', '.join(missing)}: run `vllm bench serve` with --save-result --save-detailed")
    errors = r.get("errors") or [""] * len(r["ttfts"])
    pairs, unmatched, ttfts = [], 0, []
    for i, (start, ttft, itls, error) in enumerate(zip(r["start_times"], r["ttfts"], r["itls"], errors)):
        if error or not ttft:
            continue
        sent = int(round(start * 1e9))
        arrivals = [sent + int(round(ttft * 1e9))]
        for gap in itls:
            arrivals.append(arrivals[-1] + int(round(gap * 1e9)))
        ttfts.append(ttft * 1e3)
        entries = server.get((f"{prefix}{i}", 0))
        if not entries:
            unmatched += 1
            continue
        received, tokens = nearest(entries, sent)
        pairs.append((sent, arrivals, arrivals[0], arrivals[-1], received, tokens))
    if not pairs:
        return distribution(ttfts, server, "vllm", label, f"no server line has a request id {prefix}N")
    return compare(pairs, "vllm", "per-request", sum(len(v) for v in server.values()), unmatched, label)


def batchlab_ids(request_id):
    """The batchlab request ids an `X-Request-Id: [batchlab...-]ID[,ID...]` names, in choice order
    (a prefix, such as `batchlab-RUN-`, keeps two runs' ids apart on one server); None if it is
    not of that form (a response's own id, `cmpl-7`, names no batchlab request)."""
    ids = request_id.rsplit("-", 1)[-1] if request_id.startswith("batchlab") else request_id
    parts = ids.split(",")
    return [int(p) for p in parts] if all(p.strip().isdigit() for p in parts) else None


def batchlab(server_path, requests_path, label):
    server = read_server(server_path)
    by_id = {}
    for (request_id, choice), entries in server.items():
        ids = batchlab_ids(request_id)
        if ids is not None and choice < len(ids):
            by_id.setdefault(ids[choice], []).extend(entries)
    records = []
    with open(requests_path) as f:
        for n, text in enumerate(f, 1):
            if text.strip():
                try:
                    records.append(json.loads(text))
                except ValueError as e:
                    sys.exit(f"{requests_path}:{n}: not JSON ({e})")
    done = [r for r in records if r.get("outcome") == "completed" and r.get("phase") == "measure"]
    if not done:
        sys.exit(f"{requests_path}: no completed, measured requests")
    has_sent = all(r.get("sent_ns") is not None for r in done)
    has_tokens = all(r.get("token_ns") for r in done)
    mode = "per-request" + ("" if has_tokens else ", first/last token only") + ("" if has_sent else ", dispatch as send")
    pairs, unmatched, ttfts = [], 0, []
    for r in done:
        sent = r["sent_ns"] if has_sent else r["dispatched_ns"]
        tokens_client = r.get("token_ns") if has_tokens else None
        first = tokens_client[0] if tokens_client else r.get("engine_first_token_ns")
        last = tokens_client[-1] if tokens_client else r.get("engine_last_token_ns")
        if first is None:
            unmatched += 1
            continue
        ttfts.append((first - sent) / 1e6)
        entries = by_id.get(r["id"])
        if not entries:
            unmatched += 1
            continue
        received, tokens = nearest(entries, sent)
        pairs.append((sent, tokens_client, first, last, received, tokens))
    if not pairs:
        return distribution(ttfts, server, "batchlab", label, "no server line's X-Request-Id names a batchlab request id")
    return compare(pairs, "batchlab", mode, sum(len(v) for v in server.values()), unmatched, label)


def fmt(s, key):
    v = (s or {}).get(key)
    return "–" if v is None else f"{v:.3f}"


def table(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    out = [
        "| client | setting | matched requests | TTFT diff median (ms) | TTFT p99 \\|diff\\| (ms) | TTFT max \\|diff\\| (ms) | ITL diff median (ms) | ITL p99 \\|diff\\| (ms) | ITL max \\|diff\\| (ms) | how matched |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        name = "batchlab" if r["client"] == "batchlab" else "`vllm bench serve`"
        if r["mode"] == "distribution":
            d50, d99 = r.get("ttft_p50_ms", {}), r.get("ttft_p99_ms", {})
            out.append(
                f"| {name} | {r['label']} | 0 | {fmt(d50, 'diff')} (p50 − p50) | {fmt(d99, 'diff')} (p99 − p99) | – | – | – | – | distribution only: {r['why']} |"
            )
            continue
        t, i = r["ttft_diff_ms"], r["itl_diff_ms"]
        how = r["mode"]
        if r["unmatched_client"]:
            how += f", {r['unmatched_client']} unmatched"
        if r["gap_count_mismatch"]:
            how += f", {r['gap_count_mismatch']} with another chunk count"
        out.append(
            f"| {name} | {r['label']} | {r['matched']} | {fmt(t, 'median')} | {fmt(t, 'p99_abs')} | {fmt(t, 'max_abs')} | {fmt(i, 'median')} | {fmt(i, 'p99_abs')} | {fmt(i, 'max_abs')} | {how} |"
        )
    parts = [r for r in rows if r["mode"] != "distribution"]
    if parts:
        out += [
            "",
            "Where a TTFT difference comes from: the client's send to the server's receipt (the client's own queueing, connecting and writing, and the way in), and the first token's write to its arrival as the client saw it (the way back and the client's reading):",
            "",
            "| client | setting | send → receipt median (ms) | p99 (ms) | first token write → arrival median (ms) | p99 (ms) |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for r in parts:
            name = "batchlab" if r["client"] == "batchlab" else "`vllm bench serve`"
            a, b = r["send_to_receipt_ms"], r["first_chunk_lag_ms"]
            out.append(f"| {name} | {r['label']} | {fmt(a, 'median')} | {fmt(a, 'p99_abs')} | {fmt(b, 'median')} | {fmt(b, 'p99_abs')} |")
    print("\n".join(out))


def selftest():
    """Made-up logs with known offsets: every difference must come out exactly."""
    ms = 1_000_000
    with tempfile.TemporaryDirectory() as d:
        server = os.path.join(d, "server.jsonl")
        with open(server, "w") as f:
            # vLLM's request 0 twice (its ready check first), request 1, and a batchlab batch of two.
            for rid, received in (("p-0", 1000 * ms), ("p-0", 5000 * ms), ("p-1", 6000 * ms)):
                tokens = [received + 10 * ms, received + 20 * ms, received + 30 * ms]
                f.write(json.dumps({"request_id": rid, "choice": 0, "received_ns": received, "token_ns": tokens}) + "\n")
            for choice in (0, 1):
                tokens = [8010 * ms, 8020 * ms, 8030 * ms]
                f.write(json.dumps({"request_id": "batchlab-a1b2-7,9", "choice": choice, "received_ns": 8000 * ms, "token_ns": tokens}) + "\n")
        # The vLLM client sent 1 ms before the receipt and saw every chunk 2 ms after its write,
        # except request 1's last, 5 ms after.
        result = os.path.join(d, "result.json")
        with open(result, "w") as f:
            json.dump({"start_times": [4.999, 5.999], "ttfts": [0.013, 0.013], "itls": [[0.010, 0.010], [0.010, 0.013]], "errors": ["", ""]}, f)
        r = vllm(server, result, "p-", "t")
        assert r["matched"] == 2 and r["mode"] == "per-request", r
        assert abs(r["ttft_diff_ms"]["median"] - 3.0) < 1e-6 and abs(r["ttft_diff_ms"]["max_abs"] - 3.0) < 1e-6, r
        assert abs(r["itl_diff_ms"]["max_abs"] - 3.0) < 1e-6 and abs(r["itl_diff_ms"]["median"]) < 1e-6, r
        assert abs(r["send_to_receipt_ms"]["median"] - 1.0) < 1e-6, r
        # batchlab: request 9 (choice 1) sent 0.5 ms before the receipt, chunks 1 ms after the writes.
        requests = os.path.join(d, "requests.jsonl")
        with open(requests, "w") as f:
            for rid in (7, 9):
                f.write(json.dumps({"id": rid, "phase": "measure", "outcome": "completed", "sent_ns": 7999 * ms + ms // 2,
                                    "dispatched_ns": 7990 * ms, "token_ns": [8011 * ms, 8021 * ms, 8031 * ms]}) + "\n")
            f.write(json.dumps({"id": 3, "phase": "warmup", "outcome": "completed"}) + "\n")
        r = batchlab(server, requests, "t")
        assert r["matched"] == 2 and r["mode"] == "per-request", r
        assert abs(r["ttft_diff_ms"]["max_abs"] - 1.5) < 1e-6 and r["itl_diff_ms"]["max_abs"] < 1e-6, r
        # No ids that name batchlab requests: the distributions only.
        with open(server, "w") as f:
            f.write(json.dumps({"request_id": "cmpl-1", "choice": 0, "received_ns": 0, "token_ns": [4 * ms]}) + "\n")
        r = batchlab(server, requests, "t")
        assert r["mode"] == "distribution" and abs(r["ttft_p50_ms"]["diff"] - 7.5) < 1e-6, r
    print("bench_http_compare.py selftest: ok")


def main(argv):
    if len(argv) >= 4 and argv[0] == "vllm":
        print(json.dumps(vllm(argv[1], argv[2], argv[3], argv[4] if len(argv) > 4 else "")))
    elif len(argv) >= 3 and argv[0] == "batchlab":
        print(json.dumps(batchlab(argv[1], argv[2], argv[3] if len(argv) > 3 else "")))
    elif len(argv) == 2 and argv[0] == "table":
        table(argv[1])
    elif argv == ["selftest"]:
        selftest()
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
