"""docs/python.md: predict, fit and plan from Python (what `vramsim predict/fit/plan` print, as objects)."""
import vramsim

p = vramsim.predict(model="llama-2-7b", gpu="h100-80gb", batch=4, seq=4096, precision="bf16",
                    optimizer="adamw-8bit", checkpointing="full")
print(repr(p))
print("fits:", p.fits, "| peak reserved:", p.peak_reserved, "bytes")
print("verdict:", p.verdict)
for category, size in p.bill.items():
    if size:
        print(f"  {category:<20} {size / 2**30:6.2f} GiB")

f = vramsim.fit(model="llama-2-7b", gpu="h100-80gb", seq=4096, precision="bf16", optimizer="adamw-8bit",
                checkpointing="full")
print(repr(f))

try:
    vramsim.predict(model="llama-2-7b", gpu="h100-80gb", batch=4, seq=4096, checkpointing="some")
except vramsim.VramsimError as e:
    print("VramsimError:", e)
