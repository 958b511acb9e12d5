"""The tinyloop-digitsum task: the last digit of the sum of a string of digits.

A problem is n digits 1..9 and `?`; the model writes `=`, the last digit of their sum and
<|endoftext|>:

    prompt  35274?        completion  =1<|endoftext|>        (3+5+2+7+4 = 21)

Size = n, the number of digits.  The sum is built one digit per loop pass: after pass l the
state at a digit can hold the last digit of the sum of the l+1 digits that end there, and the
state at `=` the sum of the last l digits, so the answer is complete after n passes.  Digits are
1..9, never 0, so every pass before the n-th changes the partial sum (the lens moves) and every
pass after it leaves it (the answer stays): a stable argmax means "done".

Tokens are bytes (ids 0..255) plus <|endoftext|> = 256: the format is the task's own.
"""
import json
import random

EOS = 256
VOCAB = 257
MAX_SIZE = 10             # the longest string of training and of the held-out set
HELDOUT_SIZES = range(3, MAX_SIZE + 1)  # sizes 1 and 2 have 9 and 81 problems: all are trained on
HELDOUT_SEED = 20261201
HELDOUT_PER_SIZE = 50


def make_problem(rng, size):
    """(prompt, answer, size, digits) for a random string of `size` digits 1..9."""
    if not 1 <= size <= MAX_SIZE:
        raise ValueError(f"size: {size} (allowed 1..{MAX_SIZE})")
    digits = [rng.randint(1, 9) for _ in range(size)]
    return "".join(map(str, digits)) + "?", str(sum(digits) % 10), size, digits


def window_sum(digits, end, length):
    """Last digit of the sum of the `length` digits ending at index `end` (fewer at the start)."""
    return sum(digits[max(0, end - length + 1):end + 1]) % 10


def solve(prompt):
    """The reference answer of a prompt written in the task's format (for checking)."""
    body = prompt[:-1] if prompt.endswith("?") else prompt
    if not body or not body.isdigit() or "0" in body:
        raise ValueError(f"prompt: {prompt!r} (expected digits 1..9 then '?')")
    return str(sum(map(int, body)) % 10), len(body)


def completion(answer):
    return "=" + answer


def encode(text):
    return list(text.encode("ascii"))


def heldout_problems(seed=HELDOUT_SEED, per_size=HELDOUT_PER_SIZE):
    rng = random.Random(seed)
    out, seen = [], set()
    for size in HELDOUT_SIZES:
        n = 0
        while n < per_size:
            prompt, answer, s, _ = make_problem(rng, size)
            if prompt in seen:
                continue
            seen.add(prompt)
            out.append({"prompt": prompt, "answer": answer, "size": s})
            n += 1
    return out


def write_heldout(path):
    probs = heldout_problems()
    with open(path, "w") as f:
        for p in probs:
            f.write(json.dumps(p) + "\n")
    return probs


def read_heldout(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


if __name__ == "__main__":
    import os
    import sys
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "heldout.jsonl")
    probs = write_heldout(out)
    assert all(solve(p["prompt"]) == (p["answer"], p["size"]) for p in probs)
    print(f"wrote {out}: {len(probs)} problems, sizes {HELDOUT_SIZES.start}..{HELDOUT_SIZES.stop - 1}, "
          f"seed {HELDOUT_SEED}")
