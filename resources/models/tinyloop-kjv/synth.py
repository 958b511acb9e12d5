"""Synthetic depth tasks for the tinyloop-kjv recipe (recipe v3).

Every generator takes a random.Random and returns (prompt, answer) or a full training line.
All tasks are written so that every character is its own pretokenizer chunk (single letters,
digits and punctuation with no spaces), hence one token per character.

Tasks (training mix in recipe v3: perm 75%, add 25%; chain and parity are kept for reference,
recipe v2 trained them and they stayed at chance at every depth)
  perm    composition of fixed permutations: "#7:1321=" -> apply permutation 1, then 3, then 2,
          then 1 (three fixed permutations of the digits 0-9, PERMS) to 7.  k = number of
          operations.  Each operation needs the state after the previous one, so k operations
          need about k sequential steps: the looped block can do one (or a few) per pass.
          "#7:0=" -> "7" (k = 0, operation 0 = identity) is a warm-up form.
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


# Three fixed permutations of 0..9 (seeded, so every run of the recipe uses the same ones).
PERMS = [random.Random(f"tinyloop-perm-{i}").sample(range(10), 10) for i in range(3)]


def perm_apply(s, ops):
    for o in ops:
        s = PERMS[o][s]
    return s


def perm_example(rng, k):
    """'#s:ops=' -> final state; ops are digits 1..3 (k >= 1), or the single identity op 0 (k = 0)."""
    s = rng.randrange(10)
    if k == 0:
        return f"#{s}:0=", str(s)
    ops = [rng.randrange(3) for _ in range(k)]
    return f"#{s}:" + "".join(str(o + 1) for o in ops) + "=", str(perm_apply(s, ops))


def perm_k_of(line):
    """Number of operations of a perm line (0 for the identity form)."""
    body = line[line.index(":") + 1:line.index("=")]
    return 0 if body == "0" else len(body)


def answer_mask(line):
    """1 for characters that are answers (predictable), else 0; one token per character."""
    m = [0] * len(line)
    if line[:1] in "+%#":
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


def perm_k_choice(rng, frontier):
    """Curriculum: k = the frontier with probability 0.4, else uniform over 0..frontier-1."""
    if frontier <= 0 or rng.random() < 0.4:
        return frontier
    return rng.randrange(frontier)


def train_line(rng, frontier):
    """One synthetic training line (recipe v3: perm 75%, add 25%). `frontier` is the perm
    curriculum's current longest composition (train.py raises it as it is solved)."""
    if rng.random() < 0.75:
        p, a = perm_example(rng, perm_k_choice(rng, frontier))
        return p + a
    p, a = add_example(rng, rng.randint(1, 4))
    return p + a


# evaluation task suite: name -> (generator, arg); answers are exact-match, greedy
EVAL_TASKS = {
    "perm_k1": (perm_example, 1),
    "perm_k2": (perm_example, 2),
    "perm_k4": (perm_example, 4),
    "perm_k6": (perm_example, 6),
    "add_3dig": (add_example, 3),
}
HARDEST_TASK = "perm_k6"


def eval_set(name, n, seed):
    gen, arg = EVAL_TASKS[name]
    rng = random.Random(f"{seed}-{name}")
    return [gen(rng, arg) for _ in range(n)]
