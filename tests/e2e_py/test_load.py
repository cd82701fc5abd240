"""A bounded load test: a few hundred short requests on loopback, in two rounds; none lost
or duplicated, and the server's memory after the second round is back where the first left
it (no growth per request)."""
import asyncio

import httpx

N, CONCURRENCY = 300, 16
GROWTH_LIMIT_KB = 16 * 1024  # allocator noise; a leak of 60 kB per request would show here


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def one_round(server, model, tag):
    async def run():
        sem = asyncio.Semaphore(CONCURRENCY)
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as c:
            async def one(i):
                async with sem:
                    r = await c.post("/v1/completions", json={
                        "model": model, "prompt": f"{tag} {i}", "max_tokens": 1, "user": f"req-{tag}-{i}"})
                    return i, r.status_code, r.json()
            return await asyncio.gather(*[one(i) for i in range(N)])
    return asyncio.run(run())


def test_none_lost_or_duplicated_and_memory_returns(server, model):
    baseline = None
    for tag in ("a", "b"):
        results = one_round(server, model, tag)
        assert sorted(i for i, _, _ in results) == list(range(N))
        assert all(status == 200 for _, status, _ in results)
        ids = [body["id"] for _, _, body in results]
        assert len(set(ids)) == N  # every response distinct
        assert all(body["usage"]["completion_tokens"] == 1 for _, _, body in results)
        assert httpx.get(server.url + "/health").status_code == 200
        rss = rss_kb(server.proc.pid)
        if baseline is None:
            baseline = rss
    assert rss - baseline <= GROWTH_LIMIT_KB, f"RSS grew {rss - baseline} kB over a second round of {N} requests"
