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
    """Copy F32/F16 model `src` to `dst` minus `drop_*`, with `set_keys` {key: (value, GGUFValueType)}
    and `tensor_arrays` {name: float32 array} replacing or adding tensors."""
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
    return write(w, {**kept, **arrays}, dst)


def write(writer, tensors, path):
    """Add `tensors` ({name: array}, in order) to `writer`, write the file and close it; returns `path`."""
    for name, data in tensors.items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
