// `predict --html`: the page in a real headless browser (Debian's chromium). The browser loads the file
// with nothing fetched (the page has no script and no external resource; the test checks that in the text
// too), the DOM it builds has the chart with one series per category that holds memory in the run (worked
// out from the prediction's own timeline: the categories whose live bytes are ever above 0), the peak marker
// and the bill; a screenshot is not blank (a blank page of that size is 4,838 B as this chromium renders it). Without a browser the test prints SKIPPED (CTest: skipped).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "run_cli.h"
#include "sim/predict/html_report.h"
#include "sim/predict/step_prediction.h"

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
  const std::string page = html_report(p, *p.timeline, "test page");
  int categories = 0;
  for (std::size_t c = 0; c < p.timeline->categories.size(); ++c) {
    bool any = false;
    for (const PredictedTimeline::MemorySample& m : p.timeline->memory) {
      any = any || m.live_bytes[c] > 0;
    }
    categories += any ? 1 : 0;
  }
  CHECK(count(page, "class=\"series\"") == categories);
  CHECK(page.find("<script") == std::string::npos);
  CHECK(page.find("http://") == page.find("http://www.w3.org/2000/svg"));  // only the SVG namespace
  CHECK(page.find("https://") == std::string::npos);
  CHECK(html_report(p, *p.timeline, "test page") == page);

  const std::string b = browser();
  if (b.empty()) {
    std::cout << "SKIPPED html: predict --html in a headless browser: no chromium on PATH\n";
    return;
  }
  const std::string html = "vramsim_test_page.html";
  const std::string png = "vramsim_test_page.png";
  int status = -1;
  test::run_cli("predict --model gpt2 --gpu h100 --batch 2 --seq 256 --steps 2 --html " + html, &status);
  REQUIRE(status == 0);
  const std::string flags = " --headless --no-sandbox --disable-gpu --no-first-run --window-size=1100,900 ";
  const std::string dom_cmd = b + flags + "--dump-dom file://$PWD/" + html + " 2>/dev/null";
  FILE* pipe = popen(dom_cmd.c_str(), "r");
  std::string dom;
  char buf[4096];
  while (pipe != nullptr && fgets(buf, sizeof buf, pipe) != nullptr) {
    dom += buf;
  }
  if (pipe != nullptr) {
    pclose(pipe);
  }
  if (dom.empty()) {
    std::remove(html.c_str());
    std::cout << "SKIPPED html: predict --html in a headless browser: " << b << " could not start\n";
    return;
  }
  CHECK(count(dom, "class=\"series\"") == categories);
  CHECK(count(dom, "<polygon") == categories);
  CHECK(dom.find("class=\"peak\"") != std::string::npos);
  CHECK(dom.find("class=\"bill\"") != std::string::npos);
  CHECK(std::system(
            (b + flags + "--screenshot=" + png + " file://$PWD/" + html + " >/dev/null 2>&1").c_str()) == 0);
  const std::string image = read(png);
  // A PNG of the page: much larger than a blank 1100 x 900 one (a few kilobytes), with the PNG signature.
  CHECK(image.rfind("\x89PNG", 0) == 0);
  CHECK(image.size() > 20000);
  std::remove(html.c_str());
  std::remove(png.c_str());
}
