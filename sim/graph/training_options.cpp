#include "sim/graph/training_options.h"

#include <array>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace vramsim {
namespace {

template <typename E, std::size_t N>
E parse_enum(const std::array<std::pair<std::string_view, E>, N>& table, std::string_view text,
             std::string_view option) {
  std::vector<std::string_view> known;
  for (const auto& [name, value] : table) {
    if (name == text) {
      return value;
    }
    known.push_back(name);
  }
  throw InputError(fmt::format("{}: unknown value '{}' (known: {})", option, text, fmt::join(known, ", ")));
}

template <typename E, std::size_t N>
std::string_view name_of(const std::array<std::pair<std::string_view, E>, N>& table, E value) {
  for (const auto& [name, v] : table) {
    if (v == value) {
      return name;
    }
  }
  return "?";
}

constexpr std::array<std::pair<std::string_view, Precision>, 4> kPrecisions{{
    {"fp32", Precision::kFp32},
    {"amp-fp16", Precision::kAmpFp16},
    {"amp-bf16", Precision::kAmpBf16},
    {"bf16", Precision::kBf16},
}};

constexpr std::array<std::pair<std::string_view, OptimizerKind>, 6> kOptimizers{{
    {"sgd", OptimizerKind::kSgd},
    {"sgd-momentum", OptimizerKind::kSgdMomentum},
    {"adam", OptimizerKind::kAdam},
    {"adamw", OptimizerKind::kAdamW},
    {"adamw-8bit", OptimizerKind::kAdamW8bit},
    {"adafactor", OptimizerKind::kAdafactor},
}};

constexpr std::array<std::pair<std::string_view, OptimizerImpl>, 3> kImpls{{
    {"foreach", OptimizerImpl::kForeach},
    {"fused", OptimizerImpl::kFused},
    {"for-loop", OptimizerImpl::kForLoop},
}};

constexpr std::array<std::pair<std::string_view, Checkpointing>, 3> kCheckpointing{{
    {"none", Checkpointing::kNone},
    {"full", Checkpointing::kFull},
    {"selective", Checkpointing::kSelective},
}};

constexpr std::array<std::pair<std::string_view, AttentionKind>, 2> kAttention{{
    {"math", AttentionKind::kMath},
    {"flash", AttentionKind::kFlash},
}};

// "adamw-fused" -> ("adamw", "fused"); a kind alone -> (kind, "").
std::pair<std::string_view, std::string_view> split_impl(std::string_view text) {
  for (const auto& [impl, value] : kImpls) {
    (void)value;
    if (text.size() > impl.size() + 1 && text.ends_with(impl) && text[text.size() - impl.size() - 1] == '-') {
      return {text.substr(0, text.size() - impl.size() - 1), impl};
    }
  }
  return {text, {}};
}

}  // namespace

void validate(const TrainingOptions& o) {
  if (o.batch <= 0) {
    throw InputError(fmt::format("--batch: must be positive, got {}", o.batch));
  }
  if (o.seq <= 0) {
    throw InputError(fmt::format("--seq: must be positive, got {}", o.seq));
  }
  if (!(o.dropout >= 0.0 && o.dropout < 1.0)) {
    throw InputError(fmt::format("--dropout: must be in [0, 1), got {}", o.dropout));
  }
  if (o.grad_accumulation <= 0) {
    throw InputError(fmt::format("--grad-accumulation: must be positive, got {}", o.grad_accumulation));
  }
  if (o.steps <= 0) {
    throw InputError(fmt::format("--steps: must be positive, got {}", o.steps));
  }
}

Precision parse_precision(std::string_view text, std::string_view option) {
  return parse_enum(kPrecisions, text, option);
}

OptimizerKind parse_optimizer(std::string_view text, std::string_view option) {
  return parse_enum(kOptimizers, split_impl(text).first, option);
}

OptimizerImpl parse_optimizer_impl(std::string_view text, OptimizerImpl fallback, std::string_view option) {
  const auto [kind, impl] = split_impl(text);
  (void)parse_enum(kOptimizers, kind, option);
  return impl.empty() ? fallback : parse_enum(kImpls, impl, option);
}

Checkpointing parse_checkpointing(std::string_view text, std::string_view option) {
  return parse_enum(kCheckpointing, text, option);
}

AttentionKind parse_attention(std::string_view text, std::string_view option) {
  return parse_enum(kAttention, text, option);
}

std::string_view precision_name(Precision p) { return name_of(kPrecisions, p); }
std::string_view optimizer_name(OptimizerKind o) { return name_of(kOptimizers, o); }
std::string_view optimizer_impl_name(OptimizerImpl i) { return name_of(kImpls, i); }
std::string_view checkpointing_name(Checkpointing c) { return name_of(kCheckpointing, c); }
std::string_view attention_name(AttentionKind a) { return name_of(kAttention, a); }

}  // namespace vramsim
