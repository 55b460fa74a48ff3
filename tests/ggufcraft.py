"""Write modified copies of GGUF files for tests: drop or change keys and tensors."""

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter


def copy_field(writer, key, field):
    vtype = field.types[0]
    value = field.contents()
    if vtype == GGUFValueType.ARRAY:
        writer.add_array(key, value)
    elif vtype == GGUFValueType.STRING:
        writer.add_string(key, value)
    else:
        writer.add_key_value(key, value, vtype)


def rewrite(src, dst, drop_keys=(), set_keys=None, drop_tensors=(), tensor_arrays=None):
    """Copy model `src` to `dst` minus `drop_*`, with `set_keys` {key: (value, GGUFValueType)} and
    `tensor_arrays` {name: float32 array} replacing or adding tensors; quantized tensors keep their type."""
    r = GGUFReader(str(src))
    set_keys = dict(set_keys or {})
    arch = set_keys.pop("general.architecture", (r.fields["general.architecture"].contents(), None))[0]
    w = GGUFWriter(str(dst), arch)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in drop_keys:
            continue
        if key in set_keys:
            continue
        copy_field(w, key, field)
    for key, (value, vtype) in set_keys.items():
        w.add_key_value(key, value, vtype)
    arrays = dict(tensor_arrays or {})
    kept = {t.name: np.array(t.data) for t in r.tensors if t.name not in drop_tensors}
    quantized = {t.name: t.tensor_type for t in r.tensors if np.array(t.data).dtype == np.uint8}
    return write(w, {**kept, **arrays}, dst, {k: v for k, v in quantized.items() if k not in arrays})


def write(writer, tensors, path, raw_types=None):
    """Add `tensors` ({name: array}, in order; `raw_types` {name: ggml type} for quantized bytes) to
    `writer`, write the file and close it; returns `path`."""
    for name, data in tensors.items():
        writer.add_tensor(name, data, raw_dtype=(raw_types or {}).get(name))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
