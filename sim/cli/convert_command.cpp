#include <fmt/format.h>

#include "sim/cli/commands.h"
#include "traces/trace_io.h"

namespace vramsim::cli {

void add_convert_command(CLI::App& app, std::function<int()>& run) {
  auto* cmd = app.add_subcommand("convert",
                                 "Convert a trace between formats: PyTorch snapshot pickle, its JSON "
                                 "form, and the vramsim trace format (.vtrace)");
  static std::string in_path, out_path, to;
  in_path.clear();
  out_path.clear();
  to.clear();
  cmd->add_option("IN", in_path, "input: .pickle, .json or .vtrace (format detected from the content)")
      ->required();
  cmd->add_option("OUT", out_path, "output file")->required();
  cmd->add_option("--to", to, "output format (default: from OUT's extension)")
      ->check(CLI::IsMember({"pickle", "json", "vtrace"}));
  cmd->callback([&run] {
    run = [] {
      const Snapshot snapshot = load_snapshot(in_path);
      const TraceFormat format = to.empty()       ? format_from_path(out_path)
                                 : to == "pickle" ? TraceFormat::kPickle
                                 : to == "json"   ? TraceFormat::kJson
                                                  : TraceFormat::kVtrace;
      save_snapshot(snapshot, out_path, format);
      std::size_t events = 0;
      for (const DeviceTrace& t : snapshot.device_traces) {
        events += t.events.size();
      }
      fmt::print("{} -> {} ({}): {} segments, {} trace events\n", in_path, out_path,
                 trace_format_name(format), snapshot.segments.size(), events);
      return 0;
    };
  });
}

}  // namespace vramsim::cli
