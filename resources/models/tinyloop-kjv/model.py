"""PyTorch reference of FORMAT.md section 1 (the weight-shared looped transformer) and of
section 1a (input injection, loop_input "add")."""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class HParams:
    vocab_size: int = 2048
    d_model: int = 256
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 64
    d_ff: int = 704
    n_pre_blocks: int = 1
    n_loop_layers: int = 1
    default_loops: int = 4
    max_loops: int = 16
    max_seq_len: int = 512
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    loop_input: str = "none"  # FORMAT.md section 1a: "none" or "add" (file version 2)

    def __post_init__(self):
        if self.loop_input not in ("none", "add"):
            raise ValueError(f"loop_input: {self.loop_input!r} (allowed: \"none\", \"add\")")

    def to_json(self):
        """The file's hparams; loop_input appears only when it is "add" (version-1 files unchanged)."""
        d = asdict(self)
        if d["loop_input"] == "none":
            del d["loop_input"]
        return d


def rms_norm(x, g, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def rope_tables(T, head_dim, theta, device, dtype):
    half = head_dim // 2
    i = torch.arange(half, device=device, dtype=torch.float64)
    inv = theta ** (-2.0 * i / head_dim)
    p = torch.arange(T, device=device, dtype=torch.float64)
    ang = p[:, None] * inv[None, :]
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def apply_rope(x, cos, sin):
    # x [B, nh, T, hd]; rotate pair (i, i+hd/2) by angle p*theta^(-2i/hd)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Block(nn.Module):
    def __init__(self, hp: HParams):
        super().__init__()
        d, H, Hkv = hp.d_model, hp.n_heads * hp.head_dim, hp.n_kv_heads * hp.head_dim
        self.hp = hp
        self.attn_norm = nn.Parameter(torch.ones(d))
        self.mlp_norm = nn.Parameter(torch.ones(d))
        self.wq = nn.Parameter(torch.empty(H, d))
        self.wk = nn.Parameter(torch.empty(Hkv, d))
        self.wv = nn.Parameter(torch.empty(Hkv, d))
        self.wo = nn.Parameter(torch.empty(d, H))
        self.w_gate = nn.Parameter(torch.empty(hp.d_ff, d))
        self.w_up = nn.Parameter(torch.empty(hp.d_ff, d))
        self.w_down = nn.Parameter(torch.empty(d, hp.d_ff))

    def forward(self, h, cos, sin):
        hp = self.hp
        B, T, _ = h.shape
        a = rms_norm(h, self.attn_norm, hp.norm_eps)
        q = F.linear(a, self.wq).view(B, T, hp.n_heads, hp.head_dim).transpose(1, 2)
        k = F.linear(a, self.wk).view(B, T, hp.n_kv_heads, hp.head_dim).transpose(1, 2)
        v = F.linear(a, self.wv).view(B, T, hp.n_kv_heads, hp.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        g = hp.n_heads // hp.n_kv_heads
        if g > 1:  # q head h uses kv head h // g
            k = k.repeat_interleave(g, dim=1)
            v = v.repeat_interleave(g, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(hp.head_dim))
        o = o.transpose(1, 2).reshape(B, T, hp.n_heads * hp.head_dim)
        h = h + F.linear(o, self.wo)
        m = rms_norm(h, self.mlp_norm, hp.norm_eps)
        h = h + F.linear(F.silu(F.linear(m, self.w_gate)) * F.linear(m, self.w_up), self.w_down)
        return h


class LoopedLM(nn.Module):
    def __init__(self, hp: HParams):
        super().__init__()
        assert hp.tie_embeddings
        self.hp = hp
        self.embed = nn.Parameter(torch.empty(hp.vocab_size, hp.d_model))
        self.pre = nn.ModuleList([Block(hp) for _ in range(hp.n_pre_blocks)])
        self.loop = nn.ModuleList([Block(hp) for _ in range(hp.n_loop_layers)])
        self.final_norm = nn.Parameter(torch.ones(hp.d_model))
        self.reset_parameters()

    def reset_parameters(self, seed=None):
        g = torch.Generator().manual_seed(seed) if seed is not None else None
        std = 0.02
        n_exec = self.hp.n_pre_blocks + self.hp.default_loops * self.hp.n_loop_layers
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p)
            elif name.endswith("wo") or name.endswith("w_down"):
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=g) * std / math.sqrt(2 * n_exec))
            else:
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=g) * std)

    def tensors(self):
        """Tensors named as in FORMAT.md section 2."""
        out = {"embed": self.embed}
        for kind, blocks in (("pre", self.pre), ("loop", self.loop)):
            for i, b in enumerate(blocks):
                for n in ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down"):
                    out[f"{kind}.{i}.{n}"] = getattr(b, n)
        out["final_norm"] = self.final_norm
        return out

    def head(self, h):
        return F.linear(rms_norm(h, self.final_norm, self.hp.norm_eps), self.embed)

    def forward(self, idx, L, lens_depths=None):
        """Returns logits at depth L, or a dict {l: logits} for l in lens_depths (each <= L)."""
        hp = self.hp
        B, T = idx.shape
        cos, sin = rope_tables(T, hp.head_dim, hp.rope_theta, idx.device, self.embed.dtype)
        h = self.embed[idx]
        for b in self.pre:
            h = b(h, cos, sin)
        e = h  # the prelude output, added back before every pass after the first (section 1a)
        inject = hp.loop_input == "add"
        outs = {}
        for l in range(1, L + 1):
            if inject and l > 1:
                h = h + e
            for b in self.loop:
                h = b(h, cos, sin)
            if lens_depths is not None and l in lens_depths:
                outs[l] = self.head(h)
        if lens_depths is None:
            return self.head(h)
        return outs
