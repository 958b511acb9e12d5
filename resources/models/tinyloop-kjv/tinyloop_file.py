"""Writer and pure-Python reader for the .tinyloop file (FORMAT.md section 2), f32 only.

hparams["loop_input"] (FORMAT.md section 1a): "add" (input injection) is written in a
version-2 file; "none" or absent is written as version 1 without the key, byte-identical
to files written before the key existed."""
import array
import json
import struct
import sys

MAGIC = b"TINYLOOP"
ALIGN = 64


def _pad(n):
    return (-n) % ALIGN


def tensor_order(hp):
    names = ["embed"]
    for kind, n in (("pre", hp["n_pre_blocks"]), ("loop", hp["n_loop_layers"])):
        for i in range(n):
            names += [f"{kind}.{i}.{t}" for t in ("attn_norm", "wq", "wk", "wv", "wo",
                                                  "mlp_norm", "w_gate", "w_up", "w_down")]
    names.append("final_norm")
    if not hp["tie_embeddings"]:
        names.append("head")
    return names


def format_version(hparams):
    """The file version for these hyperparameters: 2 exactly when loop_input is "add"."""
    loop_input = hparams.get("loop_input", "none")
    if loop_input not in ("none", "add"):
        raise ValueError(f"hparams.loop_input: {loop_input!r}, allowed 'none' or 'add'")
    return 2 if loop_input == "add" else 1


def write_tinyloop(path, hparams, tokenizer_json, tensors, metadata):
    """tensors: name -> (shape list, bytes of little-endian f32 row-major)."""
    assert sys.byteorder == "little"
    version = format_version(hparams)
    if version == 1:
        hparams = {k: v for k, v in hparams.items() if k != "loop_input"}
    names = tensor_order(hparams)
    assert set(names) == set(tensors), set(names) ^ set(tensors)
    entries, off = {}, 0
    for n in names:
        shape, data = tensors[n]
        cnt = 1
        for s in shape:
            cnt *= s
        assert len(data) == 4 * cnt, n
        entries[n] = {"dtype": "f32", "shape": list(shape), "offset": off}
        off += len(data) + _pad(len(data))
    header = {"format": "tinyloop", "hparams": hparams, "tokenizer": tokenizer_json,
              "tensors": entries, "metadata": metadata}
    hb = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<IIQ", version, 0, len(hb)) + hb)
        f.write(b"\0" * _pad(24 + len(hb)))
        for n in names:
            data = tensors[n][1]
            f.write(data)
            f.write(b"\0" * _pad(len(data)))


def read_tinyloop(path):
    """Pure-Python reader: returns (header dict, {name: (shape, array('f'))})."""
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:8] != MAGIC:
        raise ValueError(f"{path}: bad magic")
    version, flags, hbytes = struct.unpack_from("<IIQ", blob, 8)
    if version not in (1, 2) or flags != 0:
        raise ValueError(f"{path}: version/flags {version}/{flags}")
    if hbytes > 64 << 20 or 24 + hbytes > len(blob):
        raise ValueError(f"{path}: header_bytes")
    header = json.loads(blob[24:24 + hbytes].decode("utf-8"))
    data_start = 24 + hbytes + _pad(24 + hbytes)
    hp = header["hparams"]
    if format_version(hp) != version:
        raise ValueError(f"{path}: version {version} with hparams.loop_input "
                         f"{hp.get('loop_input', 'none')!r} (version 2 exactly when 'add')")
    if version == 1 and "loop_input" in hp:
        hp = header["hparams"] = {k: v for k, v in hp.items() if k != "loop_input"}
    if set(header["tensors"]) != set(tensor_order(hp)):
        raise ValueError(f"{path}: tensor set")
    out = {}
    regions = []
    for n, e in header["tensors"].items():
        if e["dtype"] != "f32":
            raise ValueError(f"{path}: tensors.{n}.dtype {e['dtype']} (this reader: f32 only)")
        cnt = 1
        for s in e["shape"]:
            cnt *= s
        off = data_start + e["offset"]
        if e["offset"] % ALIGN or off + 4 * cnt > len(blob):
            raise ValueError(f"{path}: tensors.{n}.offset")
        regions.append((e["offset"], e["offset"] + 4 * cnt, n))
        a = array.array("f")
        a.frombytes(blob[off:off + 4 * cnt])
        out[n] = (e["shape"], a)
    regions.sort()
    for (s0, e0, n0), (s1, e1, n1) in zip(regions, regions[1:]):
        if s1 < e0:
            raise ValueError(f"{path}: {n0} overlaps {n1}")
    return header, out
