// The `--html` pages (predict, replay, compare, sweep; trace's in tests/tracer/test_trace_cli.py) in a real
// headless browser (Debian's chromium). The browser loads the file with nothing fetched (no script, no
// external resource; the test checks that in the text too) and no console error, the DOM it builds has the
// expected number of series (worked out in each test: for predict one per category that holds memory in the
// run, from the allocator model's timeline, plus the reserved and allocated lines) and one bar per segment of
// the segment map, and the screenshot shows what the DOM says was drawn: every area's fill colour (at its
// 0.85 opacity over white) covers pixels, and more than 1 % of the pixels are not white (a blank page has
// none; png_pixels.h decodes the screenshot). Without a browser the tests print SKIPPED (CTest: skipped).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "png_pixels.h"
#include "run_cli.h"
#include "sim/predict/html_report.h"
#include "sim/predict/perfetto_trace.h"
#include "sim/predict/step_prediction.h"
#include "traces/trace_io.h"

using namespace vramsim;

namespace {

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

std::string browser() {
  for (const char* b : {"chromium", "chromium-browser"}) {
    if (std::system((std::string("command -v ") + b + " >/dev/null 2>&1").c_str()) == 0) {
      return b;
    }
  }
  return "";
}

// A page as a headless chromium loads it: the DOM it built, whether its console logged an error (a resource
// that failed to load, an uncaught exception), and a screenshot. The files are removed afterwards.
struct BrowserPage {
  bool loaded = false;
  std::string why;  // when not loaded
  std::string dom;
  bool console_clean = false;
  bool screenshot_png = false;
  std::string screenshot;  // the PNG file's bytes
};

// What the screenshot shows of the page: the pixels that are not white, and for each <polygon> of the DOM
// (an area of the chart) the pixels of its fill colour. A blank or unrendered page fails both.
struct Drawn {
  bool decoded = false;
  double not_white = 0;                  // fraction of the pixels
  std::vector<std::size_t> area_pixels;  // per polygon, in DOM order
  std::vector<double> area_px2;          // per polygon: its area by the shoelace formula (the charts' SVG
                                         // units are CSS pixels: width = viewBox width)
};

double polygon_area(const std::string& points) {  // "x,y x,y ..."
  std::vector<std::pair<double, double>> p;
  std::istringstream in(points);
  double x = 0, y = 0;
  char comma = 0;
  while (in >> x >> comma >> y) {
    p.emplace_back(x, y);
  }
  double twice = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const auto& [x1, y1] = p[i];
    const auto& [x2, y2] = p[(i + 1) % p.size()];
    twice += x1 * y2 - x2 * y1;
  }
  return std::abs(twice) / 2;
}

Drawn drawn(const BrowserPage& page) {
  Drawn d;
  const std::optional<test::PngImage> img = test::decode_png(page.screenshot);
  if (!img || img->pixels.empty()) {
    return d;
  }
  d.decoded = true;
  std::size_t not_white = 0;
  for (const test::Rgb& p : img->pixels) {
    not_white += p.r < 250 || p.g < 250 || p.b < 250 ? 1 : 0;
  }
  d.not_white = static_cast<double>(not_white) / static_cast<double>(img->pixels.size());
  for (std::size_t at = page.dom.find("<polygon"); at != std::string::npos;
       at = page.dom.find("<polygon", at + 1)) {
    const std::size_t fill = page.dom.find("fill=\"#", at);
    d.area_pixels.push_back(test::pixels_like(*img, test::hex_colour(page.dom.substr(fill + 6, 7)), 0.85));
    const std::size_t points = page.dom.find("points=\"", at) + 8;
    d.area_px2.push_back(polygon_area(page.dom.substr(points, page.dom.find('"', points) - points)));
  }
  return d;
}

// The checks on what was drawn; `areas` polygons expected.
void check_drawn(const BrowserPage& page, int areas) {
  REQUIRE(page.screenshot_png);
  const Drawn d = drawn(page);
  if (!d.decoded) {
    std::cout << "SKIPPED the screenshot's pixels: built without zlib, or not an 8-bit RGB(A) PNG\n";
    return;
  }
  INFO("not white " << d.not_white);
  CHECK(d.not_white > 0.01);
  CHECK(static_cast<int>(d.area_pixels.size()) == areas);
  // Every area of 200 px^2 or more shows at least 50 pixels of its colour (a thinner band, such as the
  // input batch's few KiB, can round to no pixel row at all).
  for (std::size_t i = 0; i < d.area_pixels.size(); ++i) {
    INFO("area " << i << ": " << d.area_px2[i] << " px^2, " << d.area_pixels[i] << " pixels of its colour");
    if (d.area_px2[i] >= 200) {
      CHECK(d.area_pixels[i] >= 50);
    }
  }
  CHECK(std::count_if(d.area_px2.begin(), d.area_px2.end(), [](double a) { return a >= 200; }) >= areas / 2);
}

BrowserPage load_in_browser(const std::string& html) {
  BrowserPage page;
  const std::string b = browser();
  if (b.empty()) {
    page.why = "no chromium on PATH";
    std::remove(html.c_str());
    return page;
  }
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --no-first-run --window-size=1100,900 --enable-logging=stderr "
      "--v=0 ";
  const std::string log = html + ".log";
  const std::string png = html + ".png";
  FILE* pipe = popen((b + flags + "--dump-dom file://$PWD/" + html + " 2>" + log).c_str(), "r");
  char buf[4096];
  while (pipe != nullptr && fgets(buf, sizeof buf, pipe) != nullptr) {
    page.dom += buf;
  }
  if (pipe != nullptr) {
    pclose(pipe);
  }
  const std::string messages = read(log);
  page.loaded = !page.dom.empty();
  page.why = b + " could not start";
  page.console_clean = messages.find("Failed to load resource") == std::string::npos &&
                       messages.find("Uncaught") == std::string::npos &&
                       messages.find(":ERROR:CONSOLE") == std::string::npos;
  if (page.loaded &&
      std::system(
          (b + flags + "--screenshot=" + png + " file://$PWD/" + html + " >/dev/null 2>&1").c_str()) == 0) {
    page.screenshot = read(png);
    page.screenshot_png = page.screenshot.rfind("\x89PNG", 0) == 0;
  }
  for (const std::string& f : {html, log, png}) {
    std::remove(f.c_str());
  }
  return page;
}

}  // namespace

TEST_CASE("html: predict --html in a headless browser", "[predict]") {
  RequestArgs a;
  a.model = "gpt2";
  a.gpu = "h100";
  a.batch = 2;
  a.seq = 256;
  a.steps = 2;
  PredictRequest r = make_request(a);
  r.keep_timeline = true;
  const Prediction p = predict(r);
  REQUIRE(p.timeline);
  const MemoryTimeline& t = p.timeline->memory;
  const std::string page = html_report(p, t, "test page");
  // One area per category that holds memory at some point, and two lines: reserved and allocated.
  int categories = 0;
  for (std::size_t c = 0; c < t.categories.size(); ++c) {
    bool any = false;
    for (const MemoryTimeline::Sample& m : t.samples) {
      any = any || m.requested_bytes[c] > 0;
    }
    categories += any ? 1 : 0;
  }
  CHECK(categories >= 5);  // parameters, gradients, optimizer states, activations, temporaries at least
  const int series = categories + 2;
  CHECK(count(page, "class=\"series\"") == series);
  // The segment map: one bar per segment of the model at the peak.
  CHECK(count(page, "class=\"segment\"") == static_cast<int>(t.segments_at_peak.size()));
  CHECK(page.find("<script") == std::string::npos);
  CHECK(page.find("http://") == page.find("http://www.w3.org/2000/svg"));  // only the SVG namespace
  CHECK(page.find("https://") == std::string::npos);
  CHECK(html_report(p, t, "test page") == page);

  int status = -1;
  test::run_cli("predict --model gpt2 --gpu h100 --batch 2 --seq 256 --steps 2 --html vramsim_test_page.html",
                &status);
  REQUIRE(status == 0);
  const BrowserPage b = load_in_browser("vramsim_test_page.html");
  if (!b.loaded) {
    std::cout << "SKIPPED html: predict --html in a headless browser: " << b.why << "\n";
    return;
  }
  CHECK(b.console_clean);
  CHECK(count(b.dom, "class=\"series\"") == series);
  CHECK(count(b.dom, "<polygon") == categories);
  CHECK(count(b.dom, "<polyline") == 2);
  CHECK(count(b.dom, "class=\"segment\"") == static_cast<int>(t.segments_at_peak.size()));
  CHECK(b.dom.find("class=\"peak\"") != std::string::npos);
  CHECK(b.dom.find("class=\"bill\"") != std::string::npos);
  check_drawn(b, categories);
}

TEST_CASE("html: replay --html of a recording in a headless browser", "[replay]") {
  // kkaitlyn111's ctx128 forward starts mid-run and has no tensor categories: the chart has two areas (the
  // blocks live at trace start, the trace's own allocations) and the reserved and allocated lines. Its
  // allocated memory peaks at the last event (a forward only allocates until it returns), so the segment map
  // at the peak is the final state, which the replay reproduces exactly: as many segments as the recording's.
  const std::string file = "traces/samples/kkaitlyn111_memory_ctx128_forward.pickle";
  const Snapshot recorded = load_snapshot(file);
  int status = -1;
  test::run_cli("replay " + file + " --html vramsim_test_replay.html", &status);
  REQUIRE(status == 0);
  const std::string page = read("vramsim_test_replay.html");
  CHECK(count(page, "class=\"series\"") == 4);
  CHECK(count(page, "data-series=\"live at trace start\"") == 1);
  CHECK(count(page, "class=\"segment\"") == static_cast<int>(recorded.segments.size()));
  const BrowserPage b = load_in_browser("vramsim_test_replay.html");
  if (!b.loaded) {
    std::cout << "SKIPPED html: replay --html of a recording in a headless browser: " << b.why << "\n";
    return;
  }
  CHECK(b.console_clean);
  CHECK(count(b.dom, "class=\"series\"") == 4);
  CHECK(count(b.dom, "class=\"segment\"") == static_cast<int>(recorded.segments.size()));
  check_drawn(b, 2);  // the two areas
}

TEST_CASE("html: compare --html and sweep --html in a headless browser", "[compare]") {
  // compare: one reserved curve per policy asked for, plus the requested bytes alive.
  int status = -1;
  test::run_cli(
      "compare traces/samples/MAGMA27_memory_snapshot.pickle --policies pytorch,buddy,offline-optimal "
      "--html vramsim_test_compare.html",
      &status);
  REQUIRE(status == 0);
  CHECK(count(read("vramsim_test_compare.html"), "class=\"series\"") == 4);
  // sweep: the sequence lengths vary (one histogram), the batch does not (a sentence, no histogram), and one
  // reserved-per-step line per policy.
  test::run_cli(
      "sweep --model gpt2 --seq list:128,256,512 --steps 3 --policies pytorch,pytorch-expandable "
      "--html vramsim_test_sweep.html",
      &status);
  REQUIRE(status == 0);
  const std::string sweep = read("vramsim_test_sweep.html");
  CHECK(count(sweep, "class=\"series\"") == 3);
  CHECK(sweep.find("batch size: 1 at every step") != std::string::npos);
  for (const char* page : {"vramsim_test_compare.html", "vramsim_test_sweep.html"}) {
    const BrowserPage b = load_in_browser(page);
    if (!b.loaded) {
      std::remove("vramsim_test_compare.html");  // load_in_browser removed only the page it was given
      std::remove("vramsim_test_sweep.html");
      std::cout << "SKIPPED html: compare --html and sweep --html in a headless browser: " << b.why << "\n";
      return;
    }
    CHECK(b.console_clean);
    CHECK(count(b.dom, "class=\"series\"") == (std::string(page) == "vramsim_test_compare.html" ? 4 : 3));
    check_drawn(b, count(b.dom, "<polygon"));
  }
}
