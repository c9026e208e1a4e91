"""Writes acme/micro-llama's snapshot in this cache: a config.json and a checkpoint sharded in two safetensors
files with their index, as save_pretrained(max_shard_size=...) lays them out. The files are written by hand
(an 8-byte little-endian header length, the JSON header, then the tensor data, here zeros): vramsim reads
only the headers. Run from the repository root: python3 tests/data/hf_cache/make_micro_llama.py"""

import json
import os
import struct

SNAPSHOT = "tests/data/hf_cache/models--acme--micro-llama/snapshots/89abcdef0123456789abcdef0123456789abcdef"
CONFIG = {"_comment": "A Llama-architecture config made small for vramsim's docs (docs/python.md); not a released "
                      "checkpoint.",
          "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
          "vocab_size": 256, "max_position_embeddings": 128, "tie_word_embeddings": False,
          "torch_dtype": "bfloat16"}
# modeling_llama.py's state_dict in bfloat16: 69,824 elements, 139,648 bytes.
SHARDS = [
    [("model.embed_tokens.weight", [256, 64]), ("model.layers.0.input_layernorm.weight", [64]),
     ("model.layers.0.self_attn.q_proj.weight", [64, 64]), ("model.layers.0.self_attn.k_proj.weight", [32, 64]),
     ("model.layers.0.self_attn.v_proj.weight", [32, 64]), ("model.layers.0.self_attn.o_proj.weight", [64, 64])],
    [("model.layers.0.post_attention_layernorm.weight", [64]), ("model.layers.0.mlp.gate_proj.weight", [128, 64]),
     ("model.layers.0.mlp.up_proj.weight", [128, 64]), ("model.layers.0.mlp.down_proj.weight", [64, 128]),
     ("model.norm.weight", [64]), ("lm_head.weight", [256, 64])],
]


def safetensors(tensors):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors:
        size = 2
        for d in shape:
            size *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the safetensors crate pads the header to 8 bytes
    return struct.pack("<Q", len(text)) + text + bytes(offset), offset


def main():
    os.makedirs(SNAPSHOT, exist_ok=True)
    with open(os.path.join(SNAPSHOT, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    weight_map, total = {}, 0
    for i, tensors in enumerate(SHARDS):
        name = f"model-{i + 1:05d}-of-{len(SHARDS):05d}.safetensors"
        data, size = safetensors(tensors)
        total += size
        with open(os.path.join(SNAPSHOT, name), "wb") as f:
            f.write(data)
        weight_map.update({t: name for t, _ in tensors})
    with open(os.path.join(SNAPSHOT, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
