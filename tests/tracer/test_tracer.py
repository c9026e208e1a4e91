"""Unit tests of the Python tracer (traces/tracer/vramsim_trace) on Debian's PyTorch (or any PyTorch).

Expected values are worked out by hand from PyTorch's rules, stated next to each check:
storages die when their last reference goes (views keep them), autograd saves what its backward formula
needs, Module.to keeps tied parameters one tensor, autocast caches the casts of leaf parameters for the
region, and CublasHandlePool.cpp's workspace sizes."""

import os
import sys
import tempfile
import unittest

from tracer_test_util import events, require_torch, run_tracer, traced

require_torch()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from vramsim_trace.tracer import cublas_workspace_bytes  # noqa: E402


class Lifetimes(unittest.TestCase):
    def test_frees_follow_references(self):
        def prog():
            x = torch.empty(1000, device="cuda")  # A0: 1000 fp32 = 4000 B
            y = x * 2  # A1: 4000 B
            del x  # x's storage dies now; seen before the next operator allocates
            z = y + 1  # A2: 4000 B
            v = y.view(10, 100)  # a view: no allocation
            del y  # v still holds the storage: no free
            s = z.sum()  # A3: one fp32 = 4 B
            del v  # now y's storage (A1) dies
            torch.empty(0, device="cuda")  # empty: the caching allocator is not called
            del z, s  # A2, A3 die when the program ends

        ev = [(a, i, n) for a, i, n, _ in events(traced(prog))]
        self.assertEqual(ev, [("alloc", 0, 4000), ("alloc", 1, 4000), ("free", 0, 4000), ("alloc", 2, 4000),
                              ("alloc", 3, 4), ("free", 1, 4000), ("free", 2, 4000), ("free", 3, 4)])

    def test_tied_weights_stay_one_storage(self):
        sizes = []

        def prog():
            emb = nn.Embedding(100, 8)
            head = nn.Linear(8, 100, bias=False)
            head.weight = emb.weight  # tied, as GPT-2 ties wte and lm_head
            m = nn.ModuleDict({"emb": emb, "head": head}).cuda()
            sizes.append(m.emb.weight.data_ptr() == m.head.weight.data_ptr())

        s = traced(prog)
        allocs = [n for a, _, n, _ in events(s) if a == "alloc"]
        self.assertEqual(allocs, [100 * 8 * 4])  # one 3200 B parameter, not two

    def test_the_programs_own_meta_tensors_are_not_on_the_gpu(self):
        def prog():
            m = torch.empty(1000, device="meta")  # a shape-only tensor the program asked for
            m2 = m * 2
            prog.keep = (m, m2)

        self.assertEqual(events(traced(prog)), [])

    def test_model_state_built_on_the_host_costs_nothing_until_moved(self):
        def prog():
            nn.Linear(4096, 4096)  # 64 MiB of weights on the host: not the simulated GPU's business

        self.assertEqual(events(traced(prog)), [])


class Categories(unittest.TestCase):
    def test_parameter_input_activation_gradient_workspace(self):
        def prog():
            lin = nn.Linear(16, 32, bias=False).cuda()  # weight: 32 x 16 fp32 = 2048 B, parameter
            x = torch.randn(8, 16).cuda()  # a host batch copied to the device: 512 B, input
            h = torch.relu(lin(x))  # mm out 1024 B (not saved: relu saves its result), relu out 1024 B saved
            loss = h.sum()
            loss.backward()  # weight.grad: x^T @ grad_h, 2048 B, kept by AccumulateGrad: gradient
            prog.keep = (lin, x)

        s = traced(prog, compute_capability=9.0)
        allocs = [(n, c, e.alloc.op) for (a, _, n, c), e in zip(events(s), s.tracer.log.events) if a == "alloc"]
        by_op = {}
        for n, c, op in allocs:
            by_op.setdefault(op.split("/")[-1], []).append((n, c))
        self.assertEqual(allocs[0][:2], (2048, "parameter"))
        self.assertEqual(allocs[1][:2], (512, "input"))
        self.assertIn((1024, "temporary"), by_op["aten.mm"])  # the linear's output, consumed by relu
        self.assertEqual(by_op["aten.relu"], [(1024, "activation")])  # relu's result, saved for backward
        self.assertIn((2048, "gradient"), by_op["aten.mm"])  # the weight gradient
        # cuBLAS: one workspace for the main thread at the first matmul, one for the autograd thread at the
        # first matmul of backward; 32 MiB each on compute capability 9.0 (CublasHandlePool.cpp).
        ws = [(n, op) for n, c, op in allocs if c == "workspace"]
        self.assertEqual(ws, [(32 << 20, "cublas_workspace.main_thread"), (32 << 20, "cublas_workspace.autograd_thread")])

    def test_optimizer_states(self):
        def prog():
            lin = nn.Linear(8, 8, bias=False).cuda()
            opt = torch.optim.AdamW(lin.parameters(), foreach=False)
            lin(torch.randn(2, 8, device="cuda")).sum().backward()
            opt.step()  # exp_avg and exp_avg_sq: 8 x 8 fp32 = 256 B each (step stays on the host)
            prog.keep = (lin, opt)

        s = traced(prog)
        states = sorted(e.alloc.op.split("/")[0] for e in s.tracer.log.events
                        if e.action == "alloc" and e.alloc.category == "optimizer_state")
        self.assertEqual(states, ["weight.exp_avg", "weight.exp_avg_sq"])


class Autocast(unittest.TestCase):
    def test_weight_cast_cache(self):
        def prog():
            lin = nn.Linear(64, 64).cuda()
            x = torch.randn(4, 64, device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                # autocast casts linear's arguments in order: x (4x64 bf16 = 512 B), weight (64x64 bf16 =
                # 8192 B, cached: a leaf that requires grad), bias (128 B, cached)
                a = lin(x)
                b = lin(x)  # x cast again (not a leaf parameter); weight and bias come from the cache
                assert a.dtype == torch.bfloat16 and b.dtype == torch.bfloat16
            with torch.autocast("cuda", dtype=torch.bfloat16):
                lin(x)  # a new region: the cache was cleared when the first one exited
            prog.keep = (a, b)

        s = traced(prog)
        casts = [e.alloc.size_bytes for e in s.tracer.log.events if e.action == "alloc" and "autocast" in e.alloc.op]
        self.assertEqual(casts, [512, 8192, 128, 512, 512, 8192, 128])

    def test_fp32_ops_and_softmax_dtype(self):
        out = {}

        def prog():
            x = torch.randn(4, 8, device="cuda", dtype=torch.bfloat16)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out["softmax"] = torch.softmax(x, dim=-1).dtype  # fp32 via its dtype argument
                out["layer_norm"] = nn.functional.layer_norm(x, (8,)).dtype  # fp32 list
                out["gelu"] = nn.functional.gelu(x).dtype  # not listed: runs in the input's dtype

        traced(prog)
        self.assertEqual(out, {"softmax": torch.float32, "layer_norm": torch.float32, "gelu": torch.bfloat16})


class TrainingLoops(unittest.TestCase):
    def test_grad_scaler_clipping_and_a_scheduler(self):
        # GradScaler keeps per-device copies with Tensor.to(device, copy=True); unscale_, clip_grad_norm_,
        # step and update must run; each step's model state is the same.
        def prog():
            model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)).cuda()
            opt = torch.optim.Adam(model.parameters())
            scaler = torch.cuda.amp.GradScaler()
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
            for _ in range(2):
                x = torch.randn(4, 16, device="cuda")
                with torch.cuda.amp.autocast():
                    loss = nn.functional.mse_loss(model(x), x)
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(opt)
                scaler.update()
                sched.step()
                opt.zero_grad(set_to_none=True)

        s = traced(prog)
        self.assertEqual([k.step for k in s.tracer.log.markers if k.phase == "optimizer"], [1, 2])

    def test_convolution_backward(self):
        # PyTorch 1.13 has no meta kernel for convolution_backward; the tracer supplies the three gradients:
        # input 2x3x8x8 fp32 = 1536 B, weight 8x3x3x3 = 864 B, bias 8 = 32 B.
        def prog():
            conv = nn.Conv2d(3, 8, 3, padding=1).cuda()
            x = torch.randn(2, 3, 8, 8, device="cuda", requires_grad=True)
            conv(x).sum().backward()
            prog.keep = (conv, x)

        s = traced(prog)
        backward = sorted(e.alloc.size_bytes for e in s.tracer.log.events
                          if e.action == "alloc" and e.alloc.phase == "backward")
        for size in (1536, 864, 32):
            self.assertIn(size, backward)

    def test_to_with_copy(self):
        def prog():
            x = torch.empty(100, device="cuda")    # 400 B
            y = x.to("cuda", copy=True)             # a copy: 400 B more
            z = x.to(device="cuda")                 # same device, no copy
            assert z is x
            prog.keep = (x, y)

        self.assertEqual([n for a, _, n, _ in events(traced(prog)) if a == "alloc"], [400, 400])


class Dropout(unittest.TestCase):
    def test_fused_kernel_on_the_gpu(self):
        # Dropout.cpp: a CUDA input with 0 < p < 1 in training takes native_dropout, which returns the output
        # and a bool mask (1 byte per element) that backward keeps; eval mode or p = 0 run nothing.
        def prog():
            x = torch.randn(1000, device="cuda", requires_grad=True)  # 4000 B
            y = nn.functional.dropout(x, 0.1, training=True)          # output 4000 B + mask 1000 B
            z = nn.functional.dropout(x, 0.1, training=False)         # eval: x itself
            assert z is x
            prog.keep = (x, y)

        allocs = [n for a, _, n, _ in events(traced(prog)) if a == "alloc"]
        self.assertEqual(allocs, [4000, 4000, 1000])


class Sdpa(unittest.TestCase):
    def _run(self, dtype, cc):
        def prog():
            q = torch.randn(2, 4, 128, 64, device="cuda", dtype=dtype, requires_grad=True)
            out = nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            out.sum().backward()
            prog.keep = q

        return traced(prog, compute_capability=cc)

    def test_flash_on_ampere_and_later(self):
        s = self._run(torch.bfloat16, 8.0)
        self.assertEqual(s.tracer.sdpa_backends, {"flash": 1})
        fwd = [e.alloc.size_bytes for e in s.tracer.log.events
               if e.action == "alloc" and e.alloc.op.endswith("flash_attention")]
        # out (2, 4, 128, 64) bf16 = 131072 B, logsumexp (2, 4, 128) fp32 = 4096 B
        self.assertEqual(fwd, [131072, 4096])

    def test_efficient_for_fp32_and_on_volta(self):
        self.assertEqual(self._run(torch.float32, 9.0).tracer.sdpa_backends, {"efficient": 1})
        self.assertEqual(self._run(torch.float16, 7.0).tracer.sdpa_backends, {"efficient": 1})


class Workspace(unittest.TestCase):
    def test_sizes_from_cublas_handle_pool(self):
        # ":4096:2:16:8" = 2 x 4096 KiB + 8 x 16 KiB before Hopper; 4096 KiB x 8 on 9.x-12.x.
        self.assertEqual(cublas_workspace_bytes(8, None), 2 * 4096 * 1024 + 8 * 16 * 1024)
        self.assertEqual(cublas_workspace_bytes(9, None), 32 << 20)
        self.assertEqual(cublas_workspace_bytes(8, ":4096:8"), 32 << 20)
        self.assertEqual(cublas_workspace_bytes(9, ":16:8"), 16 * 1024 * 8)
        self.assertEqual(cublas_workspace_bytes(7, "junk"), 2 * 4096 * 1024 + 8 * 16 * 1024)


class Phases(unittest.TestCase):
    def test_steps_with_gradient_accumulation(self):
        def prog():
            lin = nn.Linear(8, 8).cuda()
            opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
            for _ in range(2):
                for _ in range(2):  # two micro-batches per optimizer step
                    lin(torch.randn(4, 8, device="cuda")).sum().backward()
                opt.step()
                opt.zero_grad()

        m = traced(prog).tracer.log.markers
        self.assertEqual([k.step for k in m if k.phase == "forward"], [1, 1, 2, 2])
        self.assertEqual([k.step for k in m if k.phase == "backward"], [1, 1, 2, 2])
        self.assertEqual([k.step for k in m if k.phase == "optimizer"], [1, 2])

    def test_inference_loop_counts_each_forward(self):
        def prog():
            lin = nn.Linear(8, 8).cuda()
            with torch.no_grad():
                for _ in range(3):
                    lin(torch.randn(4, 8, device="cuda"))

        m = traced(prog).tracer.log.markers
        self.assertEqual([k.step for k in m if k.phase == "forward"], [1, 2, 3])


class Errors(unittest.TestCase):
    def test_script_errors_name_the_line(self):
        with tempfile.TemporaryDirectory() as d:
            rc, err, _ = run_tracer("import torch\n\nraise ValueError('boom')\n", d)
            self.assertEqual(rc, 3)
            self.assertTrue(err.strip().splitlines()[-1].endswith("script.py:3: ValueError: boom"), err)

    def test_data_dependent_operator(self):
        with tempfile.TemporaryDirectory() as d:
            rc, err, _ = run_tracer("import torch\nx = torch.ones(3, device='cuda')\nidx = torch.nonzero(x)\n", d)
            last = err.strip().splitlines()[-1]
            self.assertEqual(rc, 3)
            self.assertIn("aten.nonzero", last)
            self.assertIn("script.py:3", last)

    def test_values_of_gpu_tensors(self):
        with tempfile.TemporaryDirectory() as d:
            rc, err, _ = run_tracer("import torch\nx = torch.ones(3, device='cuda')\nprint(x.numpy())\n", d)
            self.assertEqual(rc, 3)
            self.assertIn("Tensor.numpy() needs the values", err)

    def test_script_exit_status(self):
        with tempfile.TemporaryDirectory() as d:
            rc, err, _ = run_tracer("import sys\nsys.exit(5)\n", d)
            self.assertEqual(rc, 3)
            self.assertIn("exited with status 5", err)

    def test_arguments_reach_the_script_and_files_are_written(self):
        with tempfile.TemporaryDirectory() as d:
            rc, err, out = run_tracer("import sys, torch\nassert sys.argv[1:] == ['--n', '7'], sys.argv\n"
                                      "x = torch.empty(int(sys.argv[2]), device='cuda')\n", d, ["--n", "7"])
            self.assertEqual(rc, 0, err)
            with open(out, encoding="utf-8") as f:
                lines = f.read().splitlines()
            self.assertEqual(lines[0], "vramsim-trace 1")
            self.assertTrue(any(" alloc 0x200 28 0 " in ln for ln in lines), lines)  # 7 fp32
            self.assertTrue(os.path.exists(out + ".markers.json"))


if __name__ == "__main__":
    from ctest_unittest import run

    run()
