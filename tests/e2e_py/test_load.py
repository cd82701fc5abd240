"""A bounded load test: a few hundred short requests on loopback; none lost or duplicated."""
import asyncio

import httpx

N, CONCURRENCY = 300, 16


def test_none_lost_or_duplicated(server, model):
    async def run():
        sem = asyncio.Semaphore(CONCURRENCY)
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as c:
            async def one(i):
                async with sem:
                    r = await c.post("/v1/completions", json={
                        "model": model, "prompt": f"{i}", "max_tokens": 1, "user": f"req-{i}"})
                    return i, r.status_code, r.json()
            return await asyncio.gather(*[one(i) for i in range(N)])
    results = asyncio.run(run())
    assert sorted(i for i, _, _ in results) == list(range(N))
    assert all(status == 200 for _, status, _ in results)
    ids = [body["id"] for _, _, body in results]
    assert len(set(ids)) == N  # every response distinct
    assert all(body["usage"]["completion_tokens"] == 1 for _, _, body in results)
    assert httpx.get(server.url + "/health").status_code == 200
