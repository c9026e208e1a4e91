#include "sim/hub/hf_hub_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string_view>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/models/model_config.h"

namespace vramsim {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string(value) : std::string();
}

// os.path.expanduser's "~/..." (huggingface_hub expands the variables it reads).
std::string expand_home(std::string path) {
  if (path == "~" || path.starts_with("~/")) {
    path.replace(0, 1, env("HOME"));
  }
  return path;
}

// huggingface_hub's repo id rule (utils/_validators.py, validate_repo_id): one optional namespace, names of
// letters, digits, '-', '_' and '.', not starting or ending with '-' or '.', no "--" or "..".
// A name ending in .json is a file's (a missing config.json is reported as a missing file).
bool is_hub_id(std::string_view id) {
  if (id.ends_with(".json")) {
    return false;
  }
  const auto valid_part = [](std::string_view part) {
    if (part.empty() || part.size() > 96 || part.front() == '-' || part.front() == '.' ||
        part.back() == '-' || part.back() == '.' || part.find("--") != std::string_view::npos ||
        part.find("..") != std::string_view::npos) {
      return false;
    }
    for (const char c : part) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.';
      if (!ok) {
        return false;
      }
    }
    return true;
  };
  const std::size_t slash = id.find('/');
  if (slash == std::string_view::npos) {
    return valid_part(id);
  }
  return valid_part(id.substr(0, slash)) && valid_part(id.substr(slash + 1));
}

std::string first_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\n')) {
    line.pop_back();
  }
  return line;
}

}  // namespace

std::string hf_hub_cache_dir() {
  for (const char* name : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}) {
    if (const std::string dir = env(name); !dir.empty()) {
      return expand_home(dir);
    }
  }
  std::string home = env("HF_HOME");
  if (home.empty()) {
    const std::string xdg = env("XDG_CACHE_HOME");
    home = (xdg.empty() ? env("HOME") + "/.cache" : xdg) + "/huggingface";
  }
  return expand_home(home) + "/hub";
}

std::optional<std::string> resolve_model_config(const std::string& name) {
  std::error_code ec;
  if (fs::is_directory(name, ec)) {
    const fs::path config = fs::path(name) / "config.json";
    if (!fs::is_regular_file(config, ec)) {
      throw InputError(fmt::format("--model: {}: a folder without config.json", name));
    }
    return config.string();
  }
  if (fs::exists(name, ec) || !is_hub_id(name)) {
    return std::nullopt;  // a file (read as config.json), or nothing shaped like a hub id
  }
  std::string folder_name = "models--" + name;
  if (const std::size_t slash = folder_name.find('/'); slash != std::string::npos) {
    folder_name.replace(slash, 1, "--");
  }
  const fs::path repo = fs::path(hf_hub_cache_dir()) / folder_name;
  if (!fs::is_directory(repo, ec)) {
    throw InputError(fmt::format(
        "--model: '{}' is not a preset, a file or a folder, and not in the Hugging Face cache (no {}; the "
        "cache is $HF_HUB_CACHE or $HF_HOME/hub); nothing is downloaded: fetch it with `huggingface-cli "
        "download {} config.json`, or give a config.json path",
        name, repo.string(), name));
  }
  const fs::path ref = repo / "refs" / "main";
  if (!fs::is_regular_file(ref, ec)) {
    throw InputError(
        fmt::format("--model: {}: no refs/main in the Hugging Face cache's folder {}", name, repo.string()));
  }
  const std::string commit = first_line(ref);
  const fs::path config = repo / "snapshots" / commit / "config.json";
  if (commit.empty() || commit.find('/') != std::string::npos || !fs::is_regular_file(config, ec)) {
    throw InputError(fmt::format("--model: {}: the cached snapshot {} (refs/main) has no config.json ({})",
                                 name, commit, config.string()));
  }
  return config.string();
}

std::optional<std::string> model_config_file(const std::string& name_or_path) {
  for (const std::string& preset : model_preset_names()) {
    if (preset == name_or_path) {
      return std::nullopt;
    }
  }
  const bool looks_like_path = name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json");
  std::optional<std::string> config;
  try {
    config = resolve_model_config(name_or_path);
  } catch (const InputError&) {
    if (!looks_like_path) {
      return std::nullopt;  // a bare name in no cache: the preset list's "unknown model" says more
    }
    throw;
  }
  if (!config && looks_like_path) {
    config = name_or_path;
  }
  return config;
}

}  // namespace vramsim
