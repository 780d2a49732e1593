"""Which key transformers builds a layer's MLP from: mlp_layer_types or first_k_dense_replace.

Run where torch and transformers exist (python3 tests/tools/check_mlp_layer_types.py [FIXTURES_DIR]); it
writes nothing. For each fixture it loads the checkpoint under a config.json edited so the two keys
disagree (the edits tests/archs.sh makes), prints which layers transformers built with experts, and
checks that its prefill logits are still the fixture's: the layer layout it chose is the one the weights
hold. tests/archs.sh then checks that glmc makes the same choice on the same configs.
"""
import json, os, shutil, sys, tempfile
import torch
from transformers import AutoModelForCausalLM

FIX = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../../shared/fixtures/hf")

# fixture -> config edits; the weights have a dense MLP in layer 0 and experts in layers 1 and 2
EDITS = {
    "glm4_moe_lite": {"first_k_dense_replace": 2},                            # types say layer 1 sparse
    "glm_moe_dsa": {"first_k_dense_replace": 0},                              # types say layer 0 dense
    "deepseek_v3": {"mlp_layer_types": ["dense", "dense", "sparse"]},         # first_k (1) says layer 1 sparse
    "glm4_moe": {"mlp_layer_types": ["sparse", "sparse", "sparse"]},          # first_k (1) says layer 0 dense
}

ok = True
for name, edit in EDITS.items():
    src = os.path.join(FIX, name)
    with tempfile.TemporaryDirectory() as d:
        for f in os.listdir(src):
            shutil.copy(os.path.join(src, f), d)
        cfg = json.load(open(os.path.join(d, "config.json")))
        cfg.update(edit)
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        moe = [i for i, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "experts")]
        ref = json.load(open(os.path.join(src, "reference.json")))
        want = torch.frombuffer(bytearray(open(os.path.join(src, "prefill_logits.f32"), "rb").read()),
                                dtype=torch.float32).view(len(ref["prompt"]), -1)
        with torch.no_grad():
            got = model(torch.tensor([ref["prompt"]])).logits[0]
        err = float((got - want).norm() / want.norm())
        same = err <= 1e-5
        ok &= same
        print(f"{name}: {edit} -> experts in layers {moe}; prefill logits rel-L2 {err:.3g} vs the fixture"
              f" ({'the weights fit' if same else 'DIFFERS'})")
sys.exit(0 if ok else 1)
