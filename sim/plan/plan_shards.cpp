// `vramsim plan --shard K/N` and `vramsim merge`: a plan's grid cut into shards that run anywhere (a Slurm
// job array), and the shards' parts put back together.
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/plan/plan.h"
#include "traces/json_input.h"

namespace vramsim {
namespace {

nlohmann::ordered_json request_json(const PlanRequest& r) {
  return {{"model", r.model},   {"model_code", r.model_code},
          {"gpu", r.gpu},       {"attention", r.attention},
          {"gpus", r.gpus},     {"global_batch", r.global_batch},
          {"seq", r.seq},       {"margin", r.margin},
          {"allow", r.allow},   {"gpus_per_node", r.gpus_per_node},
          {"shards", r.shards}, {"exhaustive", r.exhaustive}};
}

nlohmann::ordered_json config_json(const PlanConfig& c) {
  return {{"precision", c.precision},
          {"micro_batch", c.micro_batch},
          {"grad_accumulation", c.grad_accumulation},
          {"checkpointing", c.checkpointing},
          {"zero", c.zero},
          {"fsdp", c.fsdp},
          {"tp", c.tp},
          {"pp", c.pp},
          {"ep", c.ep},
          {"cp", c.cp},
          {"optimizer", c.optimizer},
          {"adapters", c.adapters},
          {"offload", c.offload},
          {"compile", c.compile},
          {"float8", c.float8},
          {"float8_all_gather", c.float8_all_gather}};
}

nlohmann::ordered_json evaluation_json(const PlanEvaluation& e) {
  return {{"config", config_json(e.config)},
          {"evaluated", e.evaluated},
          {"skipped", e.skipped},
          {"error", e.error},
          {"probe_micro_batches", e.probe_micro_batches},
          {"fits", e.fits},
          {"peak_reserved_bytes", e.peak_reserved_bytes},
          {"needed_bytes", e.needed_bytes},
          {"headroom_bytes", e.headroom_bytes},
          {"tokens_per_s", e.tokens_per_s},
          {"model_states_bytes", e.model_states_bytes}};
}

PlanEvaluation evaluation_from(const nlohmann::json& j) {
  PlanEvaluation e;
  const nlohmann::json& c = j.at("config");
  e.config.precision = c.at("precision");
  e.config.micro_batch = static_cast<int>(json_int(c, "micro_batch", 1, 1 << 24));
  e.config.grad_accumulation = static_cast<int>(json_int(c, "grad_accumulation", 1, 1 << 24));
  e.config.checkpointing = c.at("checkpointing");
  e.config.zero = c.at("zero");
  e.config.fsdp = c.at("fsdp");
  e.config.tp = static_cast<int>(json_int(c, "tp", 1, 65536));
  e.config.pp = static_cast<int>(json_int(c, "pp", 1, 65536));
  e.config.ep = static_cast<int>(json_int(c, "ep", 1, 65536));
  e.config.cp = static_cast<int>(json_int(c, "cp", 1, 65536));
  e.config.optimizer = c.at("optimizer");
  e.config.adapters = c.at("adapters");
  e.config.offload = c.at("offload");
  e.config.compile = c.at("compile");
  e.config.float8 = c.at("float8");
  e.config.float8_all_gather = c.at("float8_all_gather");
  e.evaluated = j.at("evaluated");
  e.skipped = j.at("skipped");
  e.error = j.at("error");
  e.probe_micro_batches = j.at("probe_micro_batches");
  e.fits = j.at("fits");
  e.peak_reserved_bytes = json_int(j, "peak_reserved_bytes", 0, kMaxJsonNumber);
  e.needed_bytes = json_int(j, "needed_bytes", 0, kMaxJsonNumber);
  e.headroom_bytes = json_int(j, "headroom_bytes", -kMaxJsonNumber, kMaxJsonNumber);
  e.tokens_per_s = j.at("tokens_per_s");
  e.model_states_bytes = json_int(j, "model_states_bytes", 0, kMaxJsonNumber);
  return e;
}

}  // namespace

std::string plan_shard_json(const PlanRequest& r, const PlanResult& p) {
  nlohmann::ordered_json j;
  j["vramsim_plan_shard"] = 1;
  j["request"] = request_json(r);
  j["shard"] = r.shard + 1;
  j["total_bytes"] = p.total_bytes;
  j["limit_bytes"] = p.limit_bytes;
  j["grid_size"] = p.grid.size();
  nlohmann::ordered_json grid = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < p.grid.size(); ++i) {
    if (p.grid[i].in_shard) {
      nlohmann::ordered_json e = evaluation_json(p.grid[i]);
      e["index"] = i;
      grid.push_back(e);
    }
  }
  j["grid"] = grid;
  nlohmann::ordered_json path = nlohmann::ordered_json::array();
  for (const PlanStep& s : p.decision_path) {
    nlohmann::ordered_json e = evaluation_json(s.result);
    e["lever"] = s.lever;
    e["setting"] = s.setting;
    path.push_back(e);
  }
  j["decision_path"] = path;
  return j.dump(1) + "\n";
}

PlanResult merge_plan_shards(const std::vector<nlohmann::json>& parts, const std::vector<std::string>& names,
                             PlanRequest& request) {
  if (parts.empty()) {
    throw InputError("merge: no shard files");
  }
  PlanResult out;
  nlohmann::json first_request;
  std::vector<bool> seen_shard;
  std::vector<bool> covered;
  for (std::size_t f = 0; f < parts.size(); ++f) {
    const std::string& name = names.at(f);
    try {
      const nlohmann::json& j = parts[f];
      if (!j.is_object() || !j.contains("vramsim_plan_shard")) {
        throw InputError(fmt::format("{}: not a `vramsim plan --shard` output", name));
      }
      const nlohmann::json& req = j.at("request");
      const int shards = static_cast<int>(json_int(req, "shards", 1, 100000));
      const int shard = static_cast<int>(json_int(j, "shard", 1, 100000));
      const auto size = static_cast<std::size_t>(json_int(j, "grid_size", 0, 10'000'000));
      if (shards < 1 || shards > 100000 || shard < 1 || shard > shards || size > 10'000'000) {
        throw InputError(fmt::format("{}: shard {} of {} is out of range", name, shard, shards));
      }
      if (f == 0) {
        first_request = req;
        request.model = req.at("model");
        request.model_code = req.at("model_code");
        request.gpu = req.at("gpu");
        request.attention = req.at("attention");
        request.gpus = req.at("gpus");
        request.global_batch = req.at("global_batch");
        request.seq = req.at("seq");
        request.margin = req.at("margin");
        request.allow = req.at("allow").get<std::vector<std::string>>();
        request.gpus_per_node = req.at("gpus_per_node");
        request.exhaustive = req.value("exhaustive", false);
        request.shards = 1;
        request.shard = 0;
        out.total_bytes = json_int(j, "total_bytes", 0, kMaxJsonNumber);
        out.limit_bytes = json_int(j, "limit_bytes", 0, kMaxJsonNumber);
        out.grid.assign(size, PlanEvaluation{});
        seen_shard.assign(static_cast<std::size_t>(shards), false);
        covered.assign(size, false);
      } else if (req != first_request || size != out.grid.size()) {
        throw InputError(
            fmt::format("{}: a shard of another plan (its request differs from {}'s)", name, names[0]));
      }
      if (seen_shard[static_cast<std::size_t>(shard - 1)]) {
        throw InputError(fmt::format("{}: shard {} of {} given twice", name, shard, shards));
      }
      seen_shard[static_cast<std::size_t>(shard - 1)] = true;
      for (const nlohmann::json& e : j.at("grid")) {
        const std::size_t i = e.at("index");
        if (i >= size || covered[i]) {
          throw InputError(fmt::format("{}: grid entry {} out of range or in two shards", name, i));
        }
        covered[i] = true;
        out.grid[i] = evaluation_from(e);
      }
      if (shard == 1) {
        for (const nlohmann::json& e : j.at("decision_path")) {
          out.decision_path.push_back(PlanStep{e.at("lever"), e.at("setting"), evaluation_from(e)});
        }
      }
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: {}", name, e.what()));
    } catch (const JsonValueError& e) {
      throw InputError(fmt::format("{}: {}", name, e.what()));
    }
  }
  for (std::size_t k = 0; k < seen_shard.size(); ++k) {
    if (!seen_shard[k]) {
      throw InputError(fmt::format("merge: shard {} of {} is missing", k + 1, seen_shard.size()));
    }
  }
  for (std::size_t i = 0; i < covered.size(); ++i) {
    if (!covered[i]) {
      throw InputError(fmt::format("merge: grid entry {} is in no shard", i));
    }
  }
  finish_plan(out);
  return out;
}

}  // namespace vramsim
