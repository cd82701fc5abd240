"""Training / eval data for the SmolLM2 DFlash2 drafter: templated prompts answered by the
TARGET itself (greedy, through a running `tandem serve`).

Prompt sources, all on this machine: four templated task families like the bench prompts
(counting, JSON arrays of objects, short Python functions, short stories / prose) whose
word lists are written here, plus story and prose subjects drawn from the words of this
repository's markdown files (README.md, docs under plugins/ and bench/). The four exact bench
prompts (BENCH) are never in the training set; `--bench` answers only them, for eval.

Token ids: prompt ids come from the server's /tokenize on the same messages (its chat
template, system prompt included). Response ids come from the streamed chat completion: with no
stop strings and no tools, tandem sends one SSE chunk per token whose text is complete UTF-8,
and each token's bytes are unique in the GGUF vocabulary (checked at start), so a chunk's bytes
are its token's id. A token that ends inside a UTF-8 character sends no chunk (its bytes come
with the next one), so the ids are accepted only when their count matches the stream's usage
(completion_tokens, the end-of-turn token included); otherwise, or when a chunk is no single
token, the prompt is asked again without streaming and with logprobs, whose per-token bytes
give the ids (the old path; `fallback` in the summary counts them). A response stopped by
end-of-turn gets the end-of-turn id appended (the API sends no text for it).

Why not logprobs for every request (what this script did until it first ran on the H200,
where 64 requests in flight got ~1,500 response tokens/s from a server that streams ~24,000
tokens/s to 64 SSE clients): a request with logprobs makes the engine copy every row's logits
to the host (49152 floats a row) and compute a full-vocabulary log-softmax for each token on
its one engine thread (serving/engine/logit_processing.cpp; about 0.35 ms a row on these
cores), so a 64-row decode step that takes 2.2 ms on the GPU takes some 25-40 ms. The client
kept its requests in flight all along (tandem's /metrics shows it on the CPU). Without
logprobs the greedy tokens are picked on the device and nothing of the logits leaves it.

The client: streaming costs 0.1-0.15 ms of Python per token (httpx reads each SSE chunk as it
comes), so one process tops out near 7,000-10,000 tokens/s; `--procs` processes (default: one per 8
requests in flight, at most half the cores) each run an asyncio loop with `--concurrency /
procs` requests and their own connection pool, sized to them; records come back to the parent,
which writes them.

    tandem serve --pipeline pipelines/default.yaml --port 18431 --max-num-seqs 32 &
    python gen_data.py --port 18431 --out data/train.jsonl --minutes 11
    python gen_data.py --port 18431 --out data/bench.jsonl --bench
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing as mp
import os
import random
import queue as queue_mod
import re
import time

import httpx
from gguf import GGUFReader

BENCH = [
    ("count", "Count from 1 to 200, one number per line."),
    ("json", 'Write a JSON array of 10 objects, each with the fields "id", "name" and "email".'),
    ("python", "Write a Python function that returns the n-th Fibonacci number, with a docstring and tests."),
    ("story", "Tell me a short story about a lighthouse keeper who finds a message in a bottle."),
]
# tandem's model store under $HOME; --gguf (or $TANDEM_GGUF) names another copy of the served GGUF.
DEFAULT_GGUF = os.environ.get("TANDEM_GGUF") or os.path.join(
    os.path.expanduser("~"), ".cache", "tandem", "models", "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FIELDS = ["id", "name", "email", "age", "city", "country", "title", "price", "quantity", "username",
          "phone", "score", "status", "created_at", "department", "salary", "author", "year", "color",
          "rating", "category", "address", "active", "tags", "url", "description"]
NOUNS = ["objects", "users", "products", "books", "employees", "students", "orders", "movies", "cities",
         "records", "customers", "songs"]
PY_TASKS = ["returns the factorial of n", "checks whether a string is a palindrome",
            "returns the greatest common divisor of two integers", "checks whether a number is prime",
            "reverses a list without using reversed()", "counts the vowels in a string",
            "returns the sum of the digits of an integer", "flattens a nested list",
            "returns the largest element of a list", "converts Celsius to Fahrenheit",
            "merges two sorted lists into one sorted list", "removes duplicates from a list keeping order",
            "returns the n-th triangular number", "computes the average of a list of numbers",
            "checks whether two strings are anagrams", "returns the binary representation of an integer",
            "counts the words in a sentence", "returns the squares of the numbers from 1 to n",
            "capitalizes the first letter of every word", "finds the second smallest number in a list",
            "computes the power of a number using a loop", "returns True if a year is a leap year",
            "sorts a list of dictionaries by a given key", "returns the length of the longest word",
            "returns the n-th prime number", "counts how often each character occurs in a string",
            "checks whether a list is sorted", "returns the product of all numbers in a list",
            "converts a Roman numeral to an integer", "converts an integer to a Roman numeral",
            "returns the intersection of two lists", "rotates a list by k positions",
            "transposes a matrix given as a list of lists", "checks whether a string has balanced parentheses",
            "returns the longest common prefix of a list of strings", "computes the median of a list",
            "converts a string to title case", "removes all whitespace from a string",
            "returns the minimum and maximum of a list", "finds the index of an element with binary search",
            "returns all even numbers from a list", "computes the distance between two points",
            "checks whether a number is a perfect square", "returns the number of days in a given month",
            "merges two dictionaries", "returns the most common element of a list",
            "generates the first n rows of Pascal's triangle", "converts a binary string to an integer",
            "checks whether a string is a valid email address", "returns the sum of a list of numbers",
            "reverses the words in a sentence", "computes the area of a circle",
            "splits a list into chunks of size n", "counts the lines in a text file",
            "returns the cumulative sum of a list", "checks whether a number is an Armstrong number"]
PY_FRAMES = ["Write a Python function that {t}, with a docstring and tests.",
             "Write a Python function that {t}.", "Implement a function in Python that {t}. Include a docstring.",
             "Create a short Python function which {t}, and show an example call.",
             "Write Python code for a function that {t}, with doctest examples.",
             "Write a Python function that {t}, and a few unit tests for it.",
             "Show me a Python function that {t}.", "In Python, write a function that {t}.",
             "Write a simple Python function that {t}, with comments."]
CHARACTERS = ["baker", "astronaut", "librarian", "fisherman", "young inventor", "old farmer", "detective",
              "painter", "robot", "shepherd", "train conductor", "beekeeper", "mail carrier", "sailor",
              "gardener", "clockmaker", "teacher", "knight", "street musician", "night watchman"]
EVENTS = ["finds a mysterious {w}", "loses a {w} and searches the whole town for it",
          "builds a {w} out of spare parts", "receives a letter about a {w}",
          "discovers that the {w} can talk", "must repair a broken {w} before sunrise",
          "wins a {w} in a contest", "follows a map to a hidden {w}"]
STORY_FRAMES = ["Tell me a short story about a {c} who {e}.", "Write a short story about a {c} who {e}.",
                "Tell a brief tale of a {c} who {e}.", "Write a very short story in which a {c} {e}."]
PROSE_FRAMES = ["Write a short paragraph explaining what a {w} is.", "Describe a {w} in three sentences.",
                "Write a short poem about a {w}.", "Explain to a child what a {w} does."]
STOP = set("about above after again against because before being below between their there these those "
           "through under until which while would could should other every where whose model tokens "
           "default")


def repo_words(n=300):
    """Frequent plain words of the repository's markdown: story / prose subjects."""
    cnt = collections.Counter()
    for dirpath, dirs, files in os.walk(ROOT):
        if any(p in dirpath for p in ("/.git", "/subprojects", "/build", "/.venv", "/tests/")):
            dirs[:] = []  # nothing below it either
            continue
        dirs.sort()  # the same words (most_common's ties) whatever the file system's order
        for f in sorted(files):
            if f.endswith(".md"):
                with open(os.path.join(dirpath, f), errors="ignore") as fh:
                    cnt.update(w for w in re.findall(r"\b[a-z]{5,11}\b", fh.read()) if w not in STOP)
    return [w for w, _ in cnt.most_common(n)]


def count_prompt(r):
    a = r.choice([0, 1, 1, 1, 2, 5, 10, 20, 50, 100, r.randint(1, 500)])
    b = a + r.choice([10, 12, 15, 20, 25, 30, 40, 50, 60, 75, 80, 90, 100, 120, 150, 199, 250])
    frames = ["Count from {a} to {b}, one number per line, with nothing else.",
              "Count down from {b} to {a}.", "Write the numbers from {a} to {b} as a numbered list.",
              "List every number between {a} and {b}, one per line.",
              "Count from {a} to {b}, one number per line.", "List the numbers from {a} to {b}, one per line.",
              "Please count from {a} up to {b}.", "Write the numbers {a} through {b}, separated by commas.",
              "Count from {a} to {b}.", "Print every integer from {a} to {b} on its own line.",
              "Count backwards from {b} to {a}, one number per line.",
              "Count from {a} to {b} in steps of 2, one number per line."]
    return r.choice(frames).format(a=a, b=b)


def json_prompt(r):
    n = r.choice([3, 4, 5, 6, 7, 8, 10, 12, 15])
    fs = r.sample(FIELDS, r.choice([2, 3, 3, 4, 5]))
    q = ", ".join(f'"{f}"' for f in fs[:-1]) + f' and "{fs[-1]}"'
    noun = r.choice(NOUNS)
    frames = [f"Write a JSON array of {n} {noun}, each with the fields {q}.",
              f"Generate a JSON list of {n} {noun} with the keys {q}.",
              f"Produce JSON: an array of {n} {noun}; every entry has {q}.",
              f"Give me {n} example {noun} as a JSON array. Fields: {q}."]
    return r.choice(frames)


PY_EXTRAS = ["", "", " Use type hints.", " Keep it short.", " Explain how it works.", " Handle invalid input.",
             " Do not use any imports.", " Add comments.", " Include an example.", " Use a loop.",
             " Make it efficient."]


def python_prompt(r):
    return r.choice(PY_FRAMES).format(t=r.choice(PY_TASKS)) + r.choice(PY_EXTRAS)


def story_prompt(r, words):
    if r.random() < 0.6:
        return r.choice(STORY_FRAMES).format(c=r.choice(CHARACTERS), e=r.choice(EVENTS).format(w=r.choice(words)))
    return r.choice(PROSE_FRAMES).format(w=r.choice(words))


def make_prompts(n, seed):
    r = random.Random(seed)
    words = repo_words()
    bench = {p for _, p in BENCH}
    seen, out = set(), []
    makers = [("count", count_prompt), ("json", json_prompt), ("python", python_prompt),
              ("story", lambda r: story_prompt(r, words))]
    misses = [0] * len(makers)
    live = list(range(len(makers)))
    i = 0
    while len(out) < n and live:  # round robin over the families that still give fresh prompts
        fam = live[i % len(live)]
        task, f = makers[fam]
        p = f(r)
        if p in bench or p in seen or ("lighthouse" in p and "bottle" in p):
            misses[fam] += 1
            if misses[fam] >= 2000:  # 2000 draws in a row gave nothing new: the family is spent
                print(f"note: {task} prompts run out at {sum(t == task for t, _ in out)}", flush=True)
                live.remove(fam)
            continue
        misses[fam] = 0
        seen.add(p)
        out.append((task, p))
        i += 1
    return out


def vocab_bytes(gguf):
    """GGUF token strings -> their bytes (GPT-2 byte-level alphabet), and the reverse map."""
    rd = GGUFReader(gguf)
    f = rd.fields["tokenizer.ggml.tokens"]
    toks = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    k = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + k)
            k += 1
    dec = {chr(c): b for b, c in zip(bs, cs)}
    ids = {}
    for i, t in enumerate(toks):
        if t.startswith("<|") and t.endswith("|>"):
            continue  # specials: never a logprob entry's bytes
        b = bytes(dec[ch] for ch in t) if all(ch in dec for ch in t) else t.encode()
        if b in ids:
            raise SystemExit(f"token bytes {b!r} not unique ({ids[b]}, {i}): cannot map logprobs to ids")
        ids[b] = i
    eot = toks.index("<|im_end|>")
    return ids, eot


async def tokenize(client, url, msgs):
    t = await client.post(f"{url}/tokenize", json={"messages": msgs})
    t.raise_for_status()
    return t.json()["tokens"]


async def stream_ids(client, url, msgs, ids, max_tokens):
    """The streamed greedy answer as (response ids, finish_reason, text), or None when the
    chunks do not give the ids exactly (see the module's docstring)."""
    body = {"messages": msgs, "temperature": 0, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}}
    resp, parts, finish, usage, exact = [], [], None, None, True
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            await r.aread()
            r.raise_for_status()
        buf = b""
        async for data in r.aiter_bytes():
            buf += data
            *events, buf = buf.split(b"\n\n")
            for ev in events:
                if not ev.startswith(b"data: "):
                    continue
                payload = ev[6:]
                if payload == b"[DONE]":
                    break
                c = json.loads(payload)
                if c.get("usage"):
                    usage = c["usage"]
                for ch in c["choices"]:
                    d = ch.get("delta") or {}
                    text = d.get("content")
                    if text and "role" not in d:
                        parts.append(text)
                        i = ids.get(text.encode())
                        if i is None:
                            exact = False  # a chunk of several tokens (a character split over them)
                        else:
                            resp.append(i)
                    if ch.get("finish_reason"):
                        finish = ch["finish_reason"]
    if finish is None or usage is None:
        raise ValueError(f"stream ended without {'finish_reason' if finish is None else 'usage'}")
    if not exact or len(resp) + (finish == "stop") != usage["completion_tokens"]:
        return None
    return resp, finish, "".join(parts)


async def logprob_ids(client, url, msgs, ids, max_tokens):
    """The old path: a non-streamed answer whose logprobs' per-token bytes give the ids."""
    r = await client.post(f"{url}/v1/chat/completions", json={
        "messages": msgs, "temperature": 0, "max_tokens": max_tokens, "logprobs": True})
    r.raise_for_status()
    ch = r.json()["choices"][0]
    return [ids[bytes(c["bytes"])] for c in ch["logprobs"]["content"]], ch["finish_reason"], ch["message"]["content"]


async def one(client, url, task, prompt, ids, eot, max_tokens, logprobs_only=False):
    msgs = [{"role": "user", "content": prompt}]

    async def generate():
        got = None if logprobs_only else await stream_ids(client, url, msgs, ids, max_tokens)
        return got or await logprob_ids(client, url, msgs, ids, max_tokens), got is None and not logprobs_only

    # /tokenize alongside the generation; both run to their end (a request cancelled inside
    # httpx's pool can keep its connection slot, and the pool then runs dry).
    tok, gen = await asyncio.gather(tokenize(client, url, msgs), generate(), return_exceptions=True)
    for r in (gen, tok):
        if isinstance(r, BaseException):
            raise r
    prompt_ids, ((resp, finish, text), fallback) = tok, gen
    if finish == "stop":
        resp.append(eot)
    return {"task": task, "prompt": prompt, "prompt_ids": prompt_ids, "response_ids": resp,
            "finish": finish, "text": text}, fallback


async def client_loop(items, url, ids, eot, args, deadline, concurrency, emit):
    """`concurrency` requests in flight over one connection pool until the items or the time
    run out; emit(kind, value) reports each record, failure and the number left unused."""
    queue = collections.deque(items)
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        async def worker():
            while queue and time.time() < deadline:
                task, p = queue.popleft()
                try:
                    rec, fallback = await one(client, url, task, p, ids, eot, args.max_tokens, args.logprobs)
                except (httpx.HTTPError, KeyError, ValueError) as e:  # one failed request is skipped
                    emit("error", f"request failed ({type(e).__name__}: {e}) for {p!r}")
                    continue
                emit("rec", (rec, fallback))
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    emit("unused", len(queue))


def child(k, items, url, ids, eot, args, deadline, concurrency, q):
    try:
        asyncio.run(client_loop(items, url, ids, eot, args, deadline, concurrency, lambda kind, v: q.put((k, kind, v))))
    except BaseException as e:  # noqa: BLE001: the parent reports it
        q.put((k, "error", f"client process {k} failed: {type(e).__name__}: {e}"))
        q.put((k, "unused", 0))


def auto_procs(concurrency):
    return max(1, min(concurrency // 8, (os.cpu_count() or 2) // 2))


class Sink:
    """The parent's end: writes the records, prints progress, counts failures."""

    def __init__(self, out):
        self.out, self.t0 = out, time.time()
        self.done = self.ntok = self.errors = self.fallbacks = self.unused = self.ended = 0

    def __call__(self, kind, v):
        if kind == "rec":
            rec, fallback = v
            self.out.write(json.dumps(rec) + "\n")
            self.done += 1
            self.fallbacks += fallback
            self.ntok += len(rec["response_ids"])
            if self.done % 50 == 0:
                print(f"{self.done} done, {self.ntok} response tokens, {time.time() - self.t0:.0f}s", flush=True)
        elif kind == "error":
            self.errors += 1
            print(v, flush=True)
            if self.errors > 20:
                raise SystemExit("more than 20 requests failed")
        elif kind == "unused":
            self.unused += v
            self.ended += 1


def run(args):
    ids, eot = vocab_bytes(args.gguf)
    url = f"http://127.0.0.1:{args.port}"
    items = BENCH if args.bench else make_prompts(args.max_prompts, args.seed)
    procs = max(1, min(args.procs or auto_procs(args.concurrency), args.concurrency))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    print(f"{len(items)} prompts, {args.concurrency} requests in flight over {procs} client process"
          + ("es" if procs > 1 else "") + (", logprobs for every request" if args.logprobs else ""), flush=True)
    deadline = time.time() + args.minutes * 60
    # Request i goes to process i % procs (the task families stay interleaved in each); the
    # concurrency is split as evenly as it goes.
    shares = [(items[k::procs], args.concurrency // procs + (k < args.concurrency % procs)) for k in range(procs)]
    with open(args.out, "w") as out:
        sink = Sink(out)
        if procs == 1:
            asyncio.run(client_loop(items, url, ids, eot, args, deadline, args.concurrency, sink))
        else:
            ctx = mp.get_context("fork")  # the children inherit the vocabulary map
            q = ctx.Queue()
            kids = [ctx.Process(target=child, args=(k, its, url, ids, eot, args, deadline, c, q), daemon=True)
                    for k, (its, c) in enumerate(shares)]
            for p in kids:
                p.start()
            try:
                while sink.ended < procs:
                    try:
                        _, kind, v = q.get(timeout=5)
                    except queue_mod.Empty:
                        if not any(p.is_alive() for p in kids) and q.empty():
                            raise SystemExit("the client processes exited without reporting")
                        continue
                    sink(kind, v)
            finally:
                for p in kids:
                    if p.is_alive():
                        p.terminate()
                    p.join()
    dt = time.time() - sink.t0
    print(f"wrote {sink.done} sequences ({sink.ntok} response tokens) to {args.out} in {dt:.0f}s"
          + f" ({sink.ntok / max(dt, 1e-9):.0f} response tokens/s"
          + (f", {sink.fallbacks} by the logprobs fallback" if sink.fallbacks else "") + ")"
          + (f", {sink.errors} requests failed" if sink.errors else "")
          + (f", {sink.unused} prompts unused" if sink.unused else ""))
    if not sink.done:
        raise SystemExit("no sequence written")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bench", action="store_true", help="answer only the four bench prompts")
    ap.add_argument("--max-prompts", type=int, default=4000)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight at once")
    ap.add_argument("--procs", type=int, default=0,
                    help="client processes sharing --concurrency (0: one per 8 requests, at most half the cores)")
    ap.add_argument("--logprobs", action="store_true",
                    help="take every response's ids from logprobs (the old, slower path) instead of the stream")
    ap.add_argument("--minutes", type=float, default=11.0, help="stop sending new requests after this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gguf", default=DEFAULT_GGUF, help="the GGUF the server serves (its vocabulary maps logprobs to ids)")
    ap.add_argument("--count-prompts", action="store_true", help="print how many distinct prompts --max-prompts gives, per task, and exit")
    args = ap.parse_args()
    if args.count_prompts:
        ps = make_prompts(args.max_prompts, args.seed)
        print(len(ps), dict(collections.Counter(t for t, _ in ps)))
        return
    run(args)


if __name__ == "__main__":
    main()
