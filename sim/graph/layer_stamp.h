// Structure once, sizes many (issue 40): a decoder layer's forward recorded once and stamped for the layers
// after it.
//
// A Transformer runs the same decoder layer n_layers times; under no_grad (torch.utils.checkpoint's forward
// for --checkpointing full) each run appends the same ops, tensors, references and edges to the tape, only
// with the layer's number in the names, its own parameters and the previous layer's output as input, and
// every id shifted by the same amount. LayerStamp records what a layer's direct emission appended (the
// region) as a template in relative form: ids relative to the region's start, tensors that existed before
// it as an index into the caller's list of `externals` (the layer's input, the shared mask and rotary
// tables, its parameters), "layers.<l>." in names as a slot. The next layer of the same structural class is
// emitted directly too, and only when its template equals the first one (the layers are periodic there,
// not merely similar) is the template used: later layers of the class are appended from it, every op,
// tensor, variable, reference count and edge as the direct emission appends them, without running the
// model's code. The allocator still sees every request: the stamped tensors are ordinary graph tensors.
//
// A region is stamped only when it is exactly reproducible from the template: grad mode off (no autograd
// nodes), no torch.compile capture, no parameter-use hooks (ZeRO-3), no selective-checkpoint region; and
// recorded only when it changed nothing that existed before it beyond appending consumers to its
// externals (reference counts, tensor fields, variables, the tape's other state are compared before and
// after). Anything else, or a layer whose template differs, is emitted directly. Templates are forgotten
// at reset() (each forward pass starts afresh, so the periodicity is checked again in every pass).
//
// set_layer_stamping(false) turns the mechanism off process-wide: every layer is emitted directly. The
// test (tests/graph/test_layer_stamp.cpp) compares both roads on a grid of configurations.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
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
  VarId run(int layer, int key, const std::vector<TensorId>& externals, const std::function<VarId()>& body);
  // The layer just run directly changed state outside the tape (the caller's): its template is dropped and
  // the class is not stamped in this pass.
  void discard(int key);

  struct Template;

 private:
  struct Before;
  Before snapshot() const;
  // The region appended since `before` as a template; nullptr when it is not reproducible.
  std::unique_ptr<Template> encode(const Before& before, int layer, const std::vector<TensorId>& externals,
                                   VarId output) const;
  VarId stamp(const Template& t, int layer, const std::vector<TensorId>& externals);

  struct Class {
    std::unique_ptr<Template> last;  // the template of the class's last direct layer
    bool verified = false;           // two consecutive direct layers gave the same template
    int recorded = 0;                // direct layers recorded in this pass
  };
  static constexpr int kMaxRecorded = 4;
  EagerTape& m_tape;
  std::map<int, Class> m_classes;
};

}  // namespace vramsim
