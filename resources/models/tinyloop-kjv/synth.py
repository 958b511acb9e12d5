"""Synthetic depth tasks for the tinyloop-kjv recipe (recipe v2).

Every generator takes a random.Random and returns (prompt, answer) or a full training line.
All tasks are written so that every character is its own pretokenizer chunk (single letters,
digits and punctuation with no spaces), hence one token per character.

Tasks
  chain   variable chains: three interleaved chains of copies rooted at distinct digits,
          statements in definition order, e.g. "k=3;b=7;q=k;x=b;z=q;z?3".
          hops = number of assignment statements on the queried variable's path (1..6).
  add     addition with numbers written least-significant digit first:
          "+472+983=" -> "1680" would be the reversed sum; see gen_add.
  parity  "%10110=" -> "1" (xor of the bits).
"""
import random
import string

LETTERS = string.ascii_lowercase


def _chain_program(rng, hops, n_chains=3, max_other=None):
    """Return (statements, chains) with chain 0 the target of length `hops`."""
    if max_other is None:
        max_other = hops
    lens = [hops] + [rng.randint(1, max(1, max_other)) for _ in range(n_chains - 1)]
    nvars = sum(lens)
    names = rng.sample(LETTERS, nvars)
    values = rng.sample("0123456789", n_chains)
    chains, k = [], 0
    for c, ln in enumerate(lens):
        vs = names[k:k + ln]
        k += ln
        st = [f"{vs[0]}={values[c]}"] + [f"{vs[i]}={vs[i-1]}" for i in range(1, ln)]
        chains.append((vs, values[c], st))
    # interleave preserving each chain's order
    ptr = [0] * n_chains
    order = []
    for c, ln in enumerate(lens):
        order += [c] * ln
    rng.shuffle(order)
    stmts = []
    for c in order:
        stmts.append(chains[c][2][ptr[c]])
        ptr[c] += 1
    return stmts, chains


def chain_example(rng, hops):
    """Eval form: prompt ends with '?', answer is the root digit of the deepest variable."""
    stmts, chains = _chain_program(rng, hops)
    vs, val, _ = chains[0]
    return ";".join(stmts) + f";{vs[-1]}?", val


def chain_train_line(rng, hops):
    """Training form: the program, then a query of every variable in random order (dense
    supervision: every hop count from 1 to `hops` is asked in every line)."""
    stmts, chains = _chain_program(rng, hops)
    qs = [(v, val) for vs, val, _ in chains for v in vs]
    rng.shuffle(qs)
    return ";".join(stmts) + "".join(f";{v}?{x}" for v, x in qs)


def answer_mask(line):
    """1 for characters that are answers (predictable), else 0; one token per character."""
    m = [0] * len(line)
    if line[:1] in "+%":
        k = line.rindex("=")
        for i in range(k + 1, len(line)):
            m[i] = 1
    else:
        for i in range(1, len(line)):
            if line[i - 1] == "?":
                m[i] = 1
    return m


def add_example(rng, ndig):
    a = rng.randint(10 ** (ndig - 1), 10 ** ndig - 1)
    b = rng.randint(10 ** (ndig - 1), 10 ** ndig - 1)
    return f"+{str(a)[::-1]}+{str(b)[::-1]}=", str(a + b)[::-1]


def parity_example(rng, nbits):
    bits = "".join(rng.choice("01") for _ in range(nbits))
    return f"%{bits}=", str(bits.count("1") % 2)


def train_line(rng, max_hops):
    """One synthetic training line; max_hops implements the curriculum (1..6)."""
    r = rng.random()
    if r < 0.7:
        return chain_train_line(rng, rng.randint(1, max_hops))
    if r < 0.9:
        p, a = add_example(rng, rng.randint(1, 5))
        return p + a
    p, a = parity_example(rng, rng.randint(2, 8))
    return p + a


# evaluation task suite: name -> (generator, arg); answers are exact-match, greedy
EVAL_TASKS = {
    "chain_h2": (chain_example, 2),
    "chain_h4": (chain_example, 4),
    "chain_h6": (chain_example, 6),
    "add_4dig": (add_example, 4),
    "parity_6": (parity_example, 6),
}
HARDEST_TASK = "chain_h6"


def eval_set(name, n, seed):
    gen, arg = EVAL_TASKS[name]
    rng = random.Random(f"{seed}-{name}")
    return [gen(rng, arg) for _ in range(n)]
