#!/usr/bin/env python3
"""Writes the ExecuTorch programs the runner executes, as JSON against
executorch 1.5.1's schema/program.fbs (examples/executorch/programs/*.json).

The JSON files are checked in: they are what `flatc --binary` turns into
.pte files in the build (build.sh). This script is how they were written,
so a change to a program is a change here; `--check` fails when the files
differ from what it writes (build.sh runs it).

Rules of the 1.5.1 emitter the runtime checks:
- a `constant_segment { segment_index: 0, offsets: [0] }`, even with no
  constants (else "relies on the constant_buffer path, which is disabled");
- every kernel call's args end with its return value: the out tensor again,
  or a TensorList of the out tensors; the kernel wrappers check the count;
- IntList items are value indices (of Int values), not integers;
- `delegates` present, even empty ("Missing delegates field");
- every tensor is planned: allocation_info { memory_id: 1, memory_offset_low }
  in one buffer, `non_const_buffer_sizes: [0, total]`.

Inputs have no ties (the runner fills them with distinct values), so
topk's order is defined and the three allocators' outputs must be equal.

The sdpa_* programs call the wheel's LLM custom ops (llama::update_cache,
custom_sdpa, sdpa_with_kv_cache, custom_quantized_sdpa; the runner's
--et-sdpa) with Llama-3.2-1B's attention shapes: 32 query heads, 8 KV
heads, head dimension 64, [batch, sequence, heads, dim] as the ops take
them. The KV caches are inputs, so their contents are defined; each
execute writes the same step into them again, so every execute computes
the same thing.

    python3 examples/executorch/gen_programs.py           # rewrite the files
    python3 examples/executorch/gen_programs.py --check   # exit 1 if stale
"""

import json
import sys
from pathlib import Path

CHAR, FLOAT, LONG = 1, 6, 4
ELEMENT_BYTES = {CHAR: 1, FLOAT: 4, LONG: 8}
# ExecuTorch aligns planned tensors to 16 bytes.
ALIGN = 16


class Program:
    """One method ("forward") of one chain, built value by value."""

    def __init__(self):
        self.values = []
        self.operators = []
        self.instructions = []
        self.planned = 0

    def _value(self, kind, val):
        self.values.append({"val_type": kind, "val": val})
        return len(self.values) - 1

    def tensor(self, dtype, sizes):
        offset = self.planned
        nbytes = ELEMENT_BYTES[dtype]
        for s in sizes:
            nbytes *= s
        self.planned += (nbytes + ALIGN - 1) // ALIGN * ALIGN
        return self._value(
            "Tensor",
            {
                "scalar_type": dtype,
                "sizes": list(sizes),
                "dim_order": list(range(len(sizes))),
                "allocation_info": {"memory_id": 1, "memory_offset_low": offset},
            },
        )

    def int(self, v):
        return self._value("Int", {"int_val": v})

    def bool(self, v):
        return self._value("Bool", {"bool_val": v})

    def double(self, v):
        return self._value("Double", {"double_val": v})

    def string(self, v):
        return self._value("String", {"string_val": v})

    def null(self):
        return self._value("Null", {})

    def int_list(self, items):
        return self._value("IntList", {"items": [self.int(i) for i in items]})

    def tensor_list(self, items):
        return self._value("TensorList", {"items": list(items)})

    def call(self, name, overload, args):
        op = {"name": name, "overload": overload}
        if op not in self.operators:
            self.operators.append(op)
        self.instructions.append(
            {
                "instr_args_type": "KernelCall",
                "instr_args": {"op_index": self.operators.index(op), "args": args},
            }
        )

    def json(self, inputs, outputs):
        plan = {
            "name": "forward",
            "values": self.values,
            "inputs": inputs,
            "outputs": outputs,
            "chains": [
                {
                    "inputs": inputs,
                    "outputs": outputs,
                    "instructions": self.instructions,
                }
            ],
            "operators": self.operators,
            "delegates": [],
            "non_const_buffer_sizes": [0, self.planned],
        }
        return {
            "version": 0,
            "execution_plan": [plan],
            "constant_segment": {"segment_index": 0, "offsets": [0]},
        }

    # Kernels, each as the 1.5.1 wrapper wants its arguments.

    def topk(self, x, sizes, k, dim):
        """aten::topk.values(self, k, dim, largest, sorted, *, values, indices)."""
        out = list(sizes)
        out[dim] = k
        values, indices = self.tensor(FLOAT, out), self.tensor(LONG, out)
        args = [x, self.int(k), self.int(dim), self.bool(True), self.bool(True)]
        self.call("aten::topk", "values", args + [values, indices, self.tensor_list([values, indices])])
        return values, indices, out

    def out_call(self, name, overload, args, dtype, sizes):
        """An op with one out tensor: args, then out, then out again (the return)."""
        out = self.tensor(dtype, sizes)
        self.call(name, overload, args + [out, out])
        return out


def topk_chain(ks, shape, dims):
    """Top-k of top-k...: one call per k, along `dims[i]`, each smaller."""
    p = Program()
    x = p.tensor(FLOAT, shape)
    outputs, sizes = [], shape
    for k, dim in zip(ks, dims):
        x, indices, sizes = p.topk(x, sizes, k, dim)
        outputs.append(indices)
    return p.json([0], outputs + [x])


def topk_between_ops():
    """Top-k between kernels that ask for no temp memory: softmax, mul, cumsum."""
    p = Program()
    n = 4096
    x = p.tensor(FLOAT, [n])
    s = p.out_call("aten::_softmax", "out", [x, p.int(0), p.bool(False)], FLOAT, [n])
    v1, i1, _ = p.topk(s, [n], 512, 0)
    m = p.out_call("aten::mul", "out", [v1, v1], FLOAT, [512])
    c = p.out_call("aten::cumsum", "out", [m, p.int(0), p.null()], FLOAT, [512])
    v2, i2, _ = p.topk(c, [512], 64, 0)
    v3, i3, _ = p.topk(v2, [64], 8, 0)
    return p.json([x], [i1, i2, i3, v3])


def survey():
    """One call each of kernels that might want scratch, to count their
    temp requests (and their own system allocations) through the adapter:
    the runner's --per-call."""
    p = Program()
    rows, cols = 64, 256
    x = p.tensor(FLOAT, [rows, cols])
    w = p.tensor(FLOAT, [cols, cols])
    img = p.tensor(FLOAT, [1, 4, 32, 32])
    kern = p.tensor(FLOAT, [8, 4, 3, 3])
    batch = p.tensor(FLOAT, [4, 64, 64])
    outs = [
        p.out_call("aten::mm", "out", [x, w], FLOAT, [rows, cols]),
        p.out_call("aten::bmm", "out", [batch, batch], FLOAT, [4, 64, 64]),
        p.out_call("aten::addmm", "out", [x, x, w, p.int(1), p.int(1)], FLOAT, [rows, cols]),
        p.out_call("aten::linear", "out", [x, w, p.null()], FLOAT, [rows, cols]),
        p.out_call("aten::_softmax", "out", [x, p.int(1), p.bool(False)], FLOAT, [rows, cols]),
        p.out_call("aten::_log_softmax", "out", [x, p.int(1), p.bool(False)], FLOAT, [rows, cols]),
        p.out_call("aten::gelu", "out", [x, p.string("none")], FLOAT, [rows, cols]),
        p.out_call("aten::cumsum", "out", [x, p.int(1), p.null()], FLOAT, [rows, cols]),
        p.out_call("aten::sum", "IntList_out", [x, p.int_list([1]), p.bool(False), p.null()], FLOAT, [rows]),
        p.out_call("aten::amax", "out", [x, p.int_list([1]), p.bool(False)], FLOAT, [rows]),
        p.out_call("aten::var", "correction_out", [x, p.int_list([1]), p.null(), p.bool(False)], FLOAT, [rows]),
        p.out_call("aten::_cdist_forward", "out", [x, x, p.double(2.0), p.null()], FLOAT, [rows, rows]),
    ]
    ln = [p.tensor(FLOAT, [rows, cols]), p.tensor(FLOAT, [rows, 1]), p.tensor(FLOAT, [rows, 1])]
    p.call(
        "aten::native_layer_norm",
        "out",
        [x, p.int_list([cols]), p.null(), p.null(), p.double(1e-5)] + ln + [p.tensor_list(ln)],
    )
    gn = [p.tensor(FLOAT, [1, 4, 32, 32]), p.tensor(FLOAT, [1, 2]), p.tensor(FLOAT, [1, 2])]
    p.call(
        "aten::native_group_norm",
        "out",
        [img, p.null(), p.null(), p.int(1), p.int(4), p.int(32 * 32), p.int(2), p.double(1e-5)] + gn + [p.tensor_list(gn)],
    )
    conv = [img, kern, p.null(), p.int_list([1, 1]), p.int_list([1, 1]), p.int_list([1, 1]), p.bool(False), p.int_list([0, 0]), p.int(1)]
    outs.append(p.out_call("aten::convolution", "out", conv, FLOAT, [1, 8, 32, 32]))
    pool = [p.tensor(FLOAT, [1, 4, 16, 16]), p.tensor(LONG, [1, 4, 16, 16])]
    p.call(
        "aten::max_pool2d_with_indices",
        "out",
        [img, p.int_list([2, 2]), p.int_list([2, 2]), p.int_list([0, 0]), p.int_list([1, 1]), p.bool(False)]
        + pool
        + [p.tensor_list(pool)],
    )
    up = [img, p.int_list([64, 64]), p.bool(False), p.null()]
    outs.append(p.out_call("aten::upsample_bilinear2d", "vec_out", up, FLOAT, [1, 4, 64, 64]))
    v, i, _ = p.topk(x, [rows, cols], 16, 1)
    return p.json([x, w, img, kern, batch], outs + ln + gn + pool + [v, i])


HEADS, KV_HEADS, HEAD_DIM = 32, 8, 64


def update_cache(p, value, cache, start):
    """llama::update_cache.out(value, cache, start_pos, *, out): out is a
    placeholder of one element (the op writes the cache)."""
    p.out_call("llama::update_cache", "out", [value, cache, p.int(start)], FLOAT, [1])


def sdpa_step(start, length, layers=1):
    """`layers` attention layers of one step of `length` tokens at `start`:
    per layer, update_cache of K and V, then custom_sdpa (causal) on the
    caches; each layer's output is the next one's query."""
    p = Program()
    q = p.tensor(FLOAT, [1, length, HEADS, HEAD_DIM])
    k = p.tensor(FLOAT, [1, length, KV_HEADS, HEAD_DIM])
    v = p.tensor(FLOAT, [1, length, KV_HEADS, HEAD_DIM])
    caches = [p.tensor(FLOAT, [1, start + length, KV_HEADS, HEAD_DIM]) for _ in range(2 * layers)]
    x = q
    for layer in range(layers):
        kc, vc = caches[2 * layer], caches[2 * layer + 1]
        update_cache(p, k, kc, start)
        update_cache(p, v, vc, start)
        args = [x, kc, vc, p.int(start), p.null(), p.double(0.0), p.bool(True), p.null()]
        x = p.out_call("llama::custom_sdpa", "out", args, FLOAT, [1, length, HEADS, HEAD_DIM])
    return p.json([q, k, v] + caches, [x])


def sdpa_with_kv_cache(start, length):
    """llama::sdpa_with_kv_cache.out: the cache update and the attention in one op."""
    p = Program()
    q = p.tensor(FLOAT, [1, length, HEADS, HEAD_DIM])
    k = p.tensor(FLOAT, [1, length, KV_HEADS, HEAD_DIM])
    v = p.tensor(FLOAT, [1, length, KV_HEADS, HEAD_DIM])
    kc = p.tensor(FLOAT, [1, start + length, KV_HEADS, HEAD_DIM])
    vc = p.tensor(FLOAT, [1, start + length, KV_HEADS, HEAD_DIM])
    args = [q, k, v, kc, vc, p.int(start), p.int(length), p.null(), p.double(0.0), p.bool(True), p.null()]
    out = p.out_call("llama::sdpa_with_kv_cache", "out", args, FLOAT, [1, length, HEADS, HEAD_DIM])
    return p.json([q, k, v, kc, vc], [out])


def quantized_sdpa(start, length):
    """llama::custom_quantized_sdpa.out: int8 query and caches with a scale
    and zero point per token and head; update_cache of the int8 K and V."""
    p = Program()
    q = p.tensor(CHAR, [1, length, HEADS, HEAD_DIM])
    k = p.tensor(CHAR, [1, length, KV_HEADS, HEAD_DIM])
    v = p.tensor(CHAR, [1, length, KV_HEADS, HEAD_DIM])
    kc = p.tensor(CHAR, [1, start + length, KV_HEADS, HEAD_DIM])
    vc = p.tensor(CHAR, [1, start + length, KV_HEADS, HEAD_DIM])
    q_zp, q_scale = p.tensor(CHAR, [1, length, HEADS, 1]), p.tensor(FLOAT, [1, length, HEADS, 1])
    params = []
    for _ in range(2):
        params += [p.tensor(CHAR, [1, start + length, KV_HEADS, 1]), p.tensor(FLOAT, [1, start + length, KV_HEADS, 1])]
    update_cache(p, k, kc, start)
    update_cache(p, v, vc, start)
    args = [q, kc, vc, p.int(start), p.null(), p.double(0.0), p.bool(True), p.null(), q_zp, q_scale] + params
    out = p.out_call("llama::custom_quantized_sdpa", "out", args + [p.bool(False)], FLOAT, [1, length, HEADS, HEAD_DIM])
    return p.json([q, k, v, kc, vc, q_zp, q_scale] + params, [out])


PROGRAMS = {
    # 5 calls, 16384 down to 16 elements: temp requests of 256 KiB to 512 B.
    "topk_chain": topk_chain([4096, 1024, 256, 64, 16], [16384], [0] * 5),
    # Rows and columns of a matrix: the reduced dimension changes.
    "topk_rows": topk_chain([256, 32, 8], [128, 2048], [1, 0, 1]),
    # 262144 elements: one 4 MiB temp request, past glibc's mmap threshold.
    "topk_large": topk_chain([16384, 1024, 64], [262144], [0] * 3),
    "topk_between_ops": topk_between_ops(),
    "survey": survey(),
    # The LLM custom ops (--et-sdpa): decode steps at 256, 512 and 2048
    # cached positions, 128-token prefill chunks at 0 and 512.
    "sdpa_decode_256": sdpa_step(256, 1),
    "sdpa_decode_512": sdpa_step(512, 1),
    "sdpa_decode_2048": sdpa_step(2048, 1),
    "sdpa_prefill_128_at_0": sdpa_step(0, 128),
    "sdpa_prefill_128_at_512": sdpa_step(512, 128),
    "sdpa_with_kv_cache_512": sdpa_with_kv_cache(512, 1),
    "sdpa_quantized_512": quantized_sdpa(512, 1),
    "sdpa_16_layers_512": sdpa_step(512, 1, layers=16),
}


def main():
    out = Path(__file__).resolve().parent / "programs"
    check = sys.argv[1:] == ["--check"]
    stale = []
    for name, program in PROGRAMS.items():
        path = out / f"{name}.json"
        text = json.dumps(program, indent=1) + "\n"
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            out.mkdir(exist_ok=True)
            path.write_text(text)
    if stale:
        sys.exit("stale, rerun examples/executorch/gen_programs.py: " + " ".join(stale))


if __name__ == "__main__":
    main()
