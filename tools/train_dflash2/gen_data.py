"""Training / eval data for the SmolLM2 DFlash2 drafter: templated prompts answered by the
TARGET itself (greedy, through a running `tandem serve`).

Prompt sources, all on this machine: four templated task families like the bench prompts
(counting, JSON arrays of objects, short Python functions, short stories / prose) whose
word lists are written here, plus story and prose subjects drawn from the words of this
repository's markdown files (README.md, docs under plugins/ and bench/). The four exact bench
prompts (BENCH) are never in the training set; `--bench` answers only them, for eval.

Token ids: prompt ids come from the server's /tokenize on the same messages (its chat
template, system prompt included); response ids from the chat completion's logprobs, whose
per-token bytes map one-to-one onto the GGUF vocabulary (checked at start), so they are the
exact ids tandem produced. A response stopped by end-of-turn gets the end-of-turn id appended
(the API does not list it as a logprob entry).

    tandem serve --pipeline pipelines/default.yaml --port 18431 --max-num-seqs 32 &
    python gen_data.py --port 18431 --out data/train.jsonl --minutes 11
    python gen_data.py --port 18431 --out data/bench.jsonl --bench
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
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
    for dirpath, _, files in os.walk(ROOT):
        if any(p in dirpath for p in ("/.git", "/subprojects", "/build", "/.venv", "/tests/")):
            continue
        for f in files:
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


async def one(client, url, task, prompt, ids, eot, max_tokens):
    msgs = [{"role": "user", "content": prompt}]
    t = await client.post(f"{url}/tokenize", json={"messages": msgs})
    t.raise_for_status()
    tk = t.json()["tokens"]
    r = await client.post(f"{url}/v1/chat/completions", json={
        "messages": msgs, "temperature": 0, "max_tokens": max_tokens, "logprobs": True})
    r.raise_for_status()
    ch = r.json()["choices"][0]
    resp = [ids[bytes(c["bytes"])] for c in ch["logprobs"]["content"]]
    if ch["finish_reason"] == "stop":
        resp.append(eot)
    return {"task": task, "prompt": prompt, "prompt_ids": tk, "response_ids": resp,
            "finish": ch["finish_reason"], "text": ch["message"]["content"]}


async def run(args):
    ids, eot = vocab_bytes(args.gguf)
    url = f"http://127.0.0.1:{args.port}"
    items = BENCH if args.bench else make_prompts(args.max_prompts, args.seed)
    deadline = time.time() + args.minutes * 60
    queue = collections.deque(items)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    done, ntok, errors = 0, 0, 0
    t0 = time.time()
    async with httpx.AsyncClient(timeout=600) as client:
        with open(args.out, "w") as out:
            async def worker():
                nonlocal done, ntok, errors
                while queue and time.time() < deadline:
                    task, p = queue.popleft()
                    try:
                        rec = await one(client, url, task, p, ids, eot, args.max_tokens)
                    except (httpx.HTTPError, KeyError, ValueError) as e:  # one failed request is skipped
                        errors += 1
                        print(f"request failed ({type(e).__name__}: {e}) for {p!r}", flush=True)
                        if errors > 20:
                            raise SystemExit("more than 20 requests failed")
                        continue
                    out.write(json.dumps(rec) + "\n")
                    done += 1
                    ntok += len(rec["response_ids"])
                    if done % 50 == 0:
                        print(f"{done} done, {ntok} response tokens, {time.time() - t0:.0f}s", flush=True)
            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    print(f"wrote {done} sequences ({ntok} response tokens) to {args.out} in {time.time() - t0:.0f}s"
          + (f", {errors} requests failed" if errors else "") + (f", {len(queue)} prompts unused" if queue else ""))
    if not done:
        raise SystemExit("no sequence written")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bench", action="store_true", help="answer only the four bench prompts")
    ap.add_argument("--max-prompts", type=int, default=4000)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--minutes", type=float, default=11.0, help="stop sending new requests after this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gguf", default=DEFAULT_GGUF, help="the GGUF the server serves (its vocabulary maps logprobs to ids)")
    ap.add_argument("--count-prompts", action="store_true", help="print how many distinct prompts --max-prompts gives, per task, and exit")
    args = ap.parse_args()
    if args.count_prompts:
        ps = make_prompts(args.max_prompts, args.seed)
        print(len(ps), dict(collections.Counter(t for t, _ in ps)))
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
