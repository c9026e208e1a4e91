"""Where the program is: training step, phase and module path, from the hooks PyTorch offers.

* module path: global forward pre/post hooks (torch.nn.modules.module.register_module_forward_*_hook); the
  path is the name under the outermost module being called (its named_modules()), e.g.
  "transformer.h.3.attn.c_attn", and the layer index is the first number in it;
* phase: "setup" before the first forward; "forward" inside the outermost module's forward; "loss" after it;
  "backward" inside torch.autograd.backward / torch.autograd.grad (checkpoint recomputation included);
  "post_backward" between backward and the optimizer (gradient clipping, GradScaler.unscale_); "optimizer"
  inside Optimizer.step; "zero_grad" inside zero_grad;
* step: a step starts at an outermost forward after an optimizer step, or after a forward that had no
  backward (an inference loop); gradient accumulation keeps forwards and backwards in one step."""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Dict, List, Optional

import torch

from .output import TraceLog

_LAYER = re.compile(r"(?:^|\.)(\d+)(?:\.|$)")


def layer_of(path: str) -> int:
    m = _LAYER.search(path)
    return int(m.group(1)) if m else -1


class PhaseTracker:
    def __init__(self, log: TraceLog) -> None:
        self.log = log
        self.step = 0
        self.phase = "setup"
        self._module_stack: List[str] = []
        self._names: Dict[int, str] = {}
        self._root: Optional[int] = None
        self._forward_had_backward = True  # no forward yet
        self._stepped_since_forward = False
        self._seen_forward = False
        self._override: List[str] = []  # backward / optimizer / zero_grad, innermost last
        self.log.mark(self.step, self.phase)

    # ---- what an allocation is tagged with ------------------------------------------------------------------

    @property
    def current_phase(self) -> str:
        return self._override[-1] if self._override else self.phase

    @property
    def module_path(self) -> str:
        return self._module_stack[-1] if self._module_stack else ""

    def _set(self, phase: str) -> None:
        self.phase = phase
        self.log.mark(self.step, self.current_phase)

    # ---- module forward hooks -----------------------------------------------------------------------------

    def forward_pre_hook(self, module: torch.nn.Module, _inputs) -> None:
        if not self._module_stack:
            self._enter_root(module)
        self._module_stack.append(self._names.get(id(module), type(module).__name__))

    def forward_post_hook(self, module: torch.nn.Module, _inputs, _output) -> None:
        if self._module_stack:
            self._module_stack.pop()
        if not self._module_stack and not self._override:
            self._set("loss" if torch.is_grad_enabled() else "after_forward")

    def _enter_root(self, module: torch.nn.Module) -> None:
        if self._root != id(module):
            self._root = id(module)
            self._names = {id(m): name for name, m in module.named_modules()}
            self._names[id(module)] = ""
        if self._override:  # checkpoint recomputation inside backward: the phase stays
            return
        if not self._seen_forward or self._stepped_since_forward or not self._forward_had_backward:
            self.step += 1
        self._seen_forward = True
        self._stepped_since_forward = False
        self._forward_had_backward = False
        self._set("forward")

    def module_name(self, module: torch.nn.Module):
        """The qualified name under the outermost module called so far; None before that or outside it."""
        return self._names.get(id(module))

    # ---- regions ----------------------------------------------------------------------------------------------

    @contextmanager
    def region(self, phase: str):
        """backward / optimizer / zero_grad: the phase while inside, and what comes after."""
        outer = not self._override
        self._override.append(phase)
        self.log.mark(self.step, phase)
        try:
            yield
        finally:
            self._override.pop()
            if outer:
                if phase == "backward":
                    self._forward_had_backward = True
                    self._set("post_backward")
                elif phase == "optimizer":
                    self._stepped_since_forward = True
                    self._set("after_optimizer")
                else:
                    self._set(self.phase)
            else:
                self.log.mark(self.step, self.current_phase)
