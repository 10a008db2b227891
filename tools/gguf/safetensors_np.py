"""Plain-numpy safetensors reading and writing (no torch, no safetensors package).

File layout: u64 little-endian header length N | N bytes of JSON | tensor bytes.
The JSON maps name -> {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to
the end of the header) plus an optional "__metadata__" string map.

    names = list_tensors(path)                 # header only
    arr = load_tensor(path, name)              # float tensors come back as float32
    tensors = load_dir(model_dir)              # every tensor of a (sharded) checkpoint
    save_file({"a": np.zeros(3, np.float32)}, path)
"""

import json
import os
import struct

import numpy as np

_NUMPY_DTYPE = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U8": np.uint8, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64, "BOOL": np.bool_,
}
_ST_DTYPE = {np.dtype(v).str: k for k, v in _NUMPY_DTYPE.items()}


def read_header(path):
    """Returns (header dict without __metadata__, data start offset, metadata dict)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{path}: too short for a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8 or n > 100 * 1024 * 1024:
            raise ValueError(f"{path}: header length {n} is implausible")
        header = json.loads(f.read(n).decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", {}) or {}
    data_start = 8 + n
    for name, info in header.items():
        begin, end = info["data_offsets"]
        if not 0 <= begin <= end or data_start + end > size:
            raise ValueError(f"{path}: tensor {name} lies outside the file")
    return header, data_start, meta


def list_tensors(path):
    header, _, _ = read_header(path)
    return list(header.keys())


def _decode(raw, dtype, shape, name):
    if dtype == "BF16":
        u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        arr = u.view(np.float32)
    elif dtype in _NUMPY_DTYPE:
        arr = np.frombuffer(raw, dtype=np.dtype(_NUMPY_DTYPE[dtype]).newbyteorder("<"))
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float32)
    else:
        raise ValueError(f"tensor {name}: unsupported safetensors dtype {dtype}")
    count = 1
    for d in shape:
        count *= int(d)
    if arr.size != count:
        raise ValueError(f"tensor {name}: {arr.size} elements for shape {shape}")
    return arr.reshape([int(d) for d in shape])


def load_file(path, names=None):
    """Dict name -> numpy array (float types as float32), in header order."""
    header, data_start, _ = read_header(path)
    out = {}
    with open(path, "rb") as f:
        for name, info in header.items():
            if names is not None and name not in names:
                continue
            begin, end = info["data_offsets"]
            f.seek(data_start + begin)
            raw = f.read(end - begin)
            out[name] = _decode(raw, info["dtype"], info["shape"], name)
    return out


def model_files(model_dir):
    """The safetensors files of a checkpoint dir: from model.safetensors.index.json when
    present (checking every indexed file exists), else every model*.safetensors, sorted."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"{index}: no weight_map")
        parts = sorted(set(weight_map.values()))
        for p in parts:
            if not os.path.isfile(os.path.join(model_dir, p)):
                raise ValueError(f"{index}: shard {p} is missing")
        return [os.path.join(model_dir, p) for p in parts], weight_map
    parts = sorted(p for p in os.listdir(model_dir)
                   if p.startswith("model") and p.endswith(".safetensors"))
    if not parts:
        raise ValueError(f"{model_dir}: no model*.safetensors files")
    return [os.path.join(model_dir, p) for p in parts], None


def load_dir(model_dir):
    """All tensors of a checkpoint directory, keyed by name (shard order, header order)."""
    files, weight_map = model_files(model_dir)
    out = {}
    for path in files:
        for name, arr in load_file(path).items():
            if name in out:
                raise ValueError(f"tensor {name} appears in two shards")
            out[name] = arr
    if weight_map is not None and set(weight_map) != set(out):
        missing = sorted(set(weight_map) - set(out))
        extra = sorted(set(out) - set(weight_map))
        raise ValueError(f"index and shards disagree: missing {missing[:5]}, extra {extra[:5]}")
    return out


def save_file(tensors, path, metadata=None):
    """Write name -> array (float32/float16/int...; bf16 not supported) in the given order."""
    header = {}
    offset = 0
    blobs = []
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr)
        st = _ST_DTYPE.get(a.dtype.newbyteorder("<").str)
        if st is None:
            raise ValueError(f"tensor {name}: dtype {a.dtype} cannot be written")
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": st, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    js = json.dumps(header, separators=(",", ":")).encode("utf-8")
    js += b" " * ((8 - len(js) % 8) % 8)   # keep the data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for raw in blobs:
            f.write(raw)
