"""Byte-level BPE exactly as FORMAT.md section 3 (pretokenizer tinyloop-ascii-v1).

Ids 0..255 are bytes; merge k creates id 256+k; special tokens follow the merges.
Encoding: pretokenize into chunks; inside each chunk repeatedly apply the lowest-ranked
applicable merge (leftmost occurrence on ties) until none applies.  Applying all
non-overlapping occurrences of the lowest-ranked pair in one left-to-right sweep is the same
thing, because any pair involving the new id ranks higher than the merge just applied.
"""
import json
import re

# FORMAT.md section 3, on bytes.  whitespace = space \t \n \r \f \v ; bytes >= 0x80 are letters.
_WS = rb" \t\n\r\x0c\x0b"
PRETOKENIZER_RE = re.compile(
    rb" ?[0-9]"
    rb"| ?[A-Za-z\x80-\xff]+"
    rb"| ?[^" + _WS + rb"A-Za-z0-9\x80-\xff]+"
    rb"|[" + _WS + rb"]+(?![^" + _WS + rb"])"
    rb"|[" + _WS + rb"]+"
)
EOT = "<|endoftext|>"


def pretokenize(data: bytes):
    chunks = PRETOKENIZER_RE.findall(data)
    assert sum(len(c) for c in chunks) == len(data), "pretokenizer must cover the input"
    return chunks


class Tokenizer:
    def __init__(self, merges, special_tokens=None):
        self.merges = [tuple(m) for m in merges]
        self.ranks = {m: i for i, m in enumerate(self.merges)}
        self.special_tokens = dict(special_tokens or {})
        self.vocab = [bytes([i]) for i in range(256)]
        for a, b in self.merges:
            assert a < len(self.vocab) and b < len(self.vocab)
            self.vocab.append(self.vocab[a] + self.vocab[b])
        for s, i in sorted(self.special_tokens.items(), key=lambda kv: kv[1]):
            assert i == len(self.vocab), "special tokens follow the merges"
            self.vocab.append(s.encode("utf-8"))
        self.eos_id = self.special_tokens.get(EOT)
        self._cache = {}

    @property
    def n_ids(self):
        return len(self.vocab)

    def _encode_chunk(self, chunk: bytes):
        ids = self._cache.get(chunk)
        if ids is not None:
            return ids
        ids = list(chunk)
        ranks = self.ranks
        while len(ids) >= 2:
            best, best_rank = None, None
            for i in range(len(ids) - 1):
                r = ranks.get((ids[i], ids[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = i, r
            if best is None:
                break
            a, b = self.merges[best_rank]
            new_id = 256 + best_rank
            out, i = [], 0
            while i < len(ids):  # sweep: leftmost first, non-overlapping
                if i + 1 < len(ids) and ids[i] == a and ids[i + 1] == b:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            ids = out
        if len(self._cache) < 500000:
            self._cache[chunk] = ids
        return ids

    def encode(self, text):
        """Encode text; special-token strings are ordinary text."""
        data = text.encode("utf-8") if isinstance(text, str) else text
        out = []
        for ch in pretokenize(data):
            out.extend(self._encode_chunk(ch))
        return out

    def decode_bytes(self, ids):
        return b"".join(self.vocab[i] for i in ids)

    def decode(self, ids):
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def to_json(self):
        return {"type": "byte_bpe", "pretokenizer": "tinyloop-ascii-v1",
                "merges": [list(m) for m in self.merges],
                "special_tokens": self.special_tokens,
                "eos_id": self.eos_id, "bos_id": None}

    @classmethod
    def from_json(cls, obj):
        assert obj["type"] == "byte_bpe" and obj["pretokenizer"] == "tinyloop-ascii-v1"
        return cls(obj["merges"], obj["special_tokens"])

    @classmethod
    def load(cls, path):
        with open(path) as f:
            return cls.from_json(json.load(f))


def encode_reference(tok, text):
    """Slow, literal reference: one merge at a time, lowest rank, leftmost."""
    data = text.encode("utf-8")
    out = []
    for ch in pretokenize(data):
        ids = list(ch)
        while True:
            best = None
            for i in range(len(ids) - 1):
                r = tok.ranks.get((ids[i], ids[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            r, i = best
            ids[i:i + 2] = [256 + r]
        out.extend(ids)
    return out
