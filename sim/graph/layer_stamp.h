// Structure once, sizes many (issue 40): a decoder layer recorded once and stamped for the layers after it.
//
// A Transformer runs the same decoder layer n_layers times, in the forward and again (with autograd) when
// full checkpointing recomputes it in backward; each run appends the same ops, tensors, variables, autograd
// nodes, reference counts and edges to the tape, only with the layer's number in the names, its own
// parameters and the previous layer's output as input, and every id shifted by the same amount. LayerStamp
// records what a layer's direct emission appended (its region) as a template in relative form: ids
// relative to the region's start, what existed before it as an index into the caller's list of external
// variables (the layer's input, the shared mask and rotary tables, its parameters and adapters),
// "layers.<l>." in names as a slot, layer numbers relative to the layer. The next layer of the same class
// is emitted directly too, and only when its template equals the first one (the layers are periodic there,
// not merely similar) is the template used: the later layers of the class are appended from it, without
// running the model's code. The allocator still sees every request: stamped tensors are graph tensors.
//
// A region is recorded only when it is exactly reproducible from its template: it changed nothing that
// existed before it but its externals (their reference counts, the fields autograd's saving sets, their
// consumers) and the parameter-use counts of its own autograd nodes (compared before and after: the
// tape's references, tensors, variables and other state); its autograd nodes are plain op nodes; no
// torch.compile capture, no parameter-use hooks (ZeRO-3), no selective-checkpoint region, no saved-tensor
// hooks while autograd records. A template is used only while the externals are in the state it saw
// (requires_grad, shapes, fields). Classes are keyed by the caller's structural class (MoE or dense,
// Gemma 2's sliding layers), grad mode, phase, step and micro-batch; reset() forgets them (every forward
// pass checks its layers' periodicity afresh).
//
// set_layer_stamping(false) turns the mechanism off process-wide: every layer is emitted directly. The
// test (tests/graph/test_layer_stamp.cpp) compares both roads on a grid of configurations.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "sim/graph/eager_tape.h"

namespace vramsim {

void set_layer_stamping(bool on);  // default on
bool layer_stamping();
// Layers appended from a template since the process started (tests check that the stamped road ran).
std::uint64_t layers_stamped();

class LayerStamp {
 public:
  explicit LayerStamp(EagerTape& tape);
  ~LayerStamp();
  LayerStamp(const LayerStamp&) = delete;
  LayerStamp& operator=(const LayerStamp&) = delete;

  // Forgets every template (a new forward pass).
  void reset();
  // Whether run() may record or stamp now (grad off, no capture, no hooks, no selective region, switch on).
  bool eligible() const;
  // Layer `layer` of structural class `key`: body() emits it directly and returns its output variable.
  // `externals`: every storage that exists before the layer and that it may read (its input, the shared
  // tensors, its parameters), in the same order for every layer of the class. Returns the output variable,
  // stamped from the class's verified template when there is one.
  VarId run(int layer, int key, const std::vector<VarId>& externals, const std::function<VarId()>& body);
  // The layer just run directly changed state outside the tape (the caller's): its template is dropped and
  // the class is not stamped in this pass.
  void discard(int key);

  struct Template;

 private:
  struct Before;
  Before snapshot() const;
  // The region appended since `before` as a template; nullptr when it is not reproducible.
  std::unique_ptr<Template> encode(const Before& before, int layer, const std::vector<VarId>& externals,
                                   VarId output) const;
  std::vector<TensorId> storages(const std::vector<VarId>& vars) const;
  // The externals are in the state the template's were in before its region.
  bool applies(const Template& t, int layer, const std::vector<VarId>& external_vars,
               const std::vector<TensorId>& externals) const;
  VarId stamp(const Template& t, int layer, const std::vector<VarId>& external_vars,
              const std::vector<TensorId>& externals);

  struct Class {
    std::unique_ptr<Template> last;  // the template of the class's last direct layer
    bool verified = false;           // two consecutive direct layers gave the same template
    int recorded = 0;                // direct layers recorded in this pass
  };
  static constexpr int kMaxRecorded = 4;
  EagerTape& m_tape;
  // the caller's class, grad mode, phase, step, micro-batch
  using ClassKey = std::tuple<int, bool, Phase, int, int>;
  ClassKey class_key(int key) const;
  std::map<ClassKey, Class> m_classes;
};

}  // namespace vramsim
