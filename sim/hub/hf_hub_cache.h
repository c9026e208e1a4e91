// --model as users have models on disk: a local model folder (its config.json), or a Hugging Face hub id
// ("meta-llama/Llama-2-7b-hf") found in the local Hugging Face cache. Nothing is downloaded.
#pragma once

#include <optional>
#include <string>

namespace vramsim {

// The hub cache folder, as huggingface_hub/constants.py computes it: $HF_HUB_CACHE, else the legacy
// $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub.
std::string hf_hub_cache_dir();

// The config.json that --model `name` (not a preset) stands for: `name` itself when it is a file;
// DIR/config.json when it is a folder; for a hub id (ORG/NAME or NAME, no other slash, no leading '.' or
// '/'), the cached snapshot huggingface_hub's try_to_load_from_cache(repo_id, "config.json") finds
// (file_download.py): <cache>/models--ORG--NAME/refs/main holds the commit, snapshots/<commit>/config.json is
// the file. std::nullopt: `name` is none of these shapes (the caller says "unknown model"). Throws InputError
// naming what is missing: a folder without config.json, a hub id not in the cache (with the folder looked
// in).
std::optional<std::string> resolve_model_config(const std::string& name);

// The config.json file --model `name_or_path` reads: std::nullopt for a preset, and for a bare name found
// nowhere (the caller reports the unknown model); else resolve_model_config's, or the path as given.
std::optional<std::string> model_config_file(const std::string& name_or_path);

}  // namespace vramsim
