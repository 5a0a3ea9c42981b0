// SVG Gantt chart of a simulated run: one row per stage (rank position, replica 0), a communication strip
// and a memory curve under each row, a time axis in ms and a legend. Plain SVG 1.1, no scripts, so any
// renderer (browsers, rsvg-convert) shows it. A position holding several chunks draws its later chunks
// darker and labels boxes "microbatch c chunk".
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "pd2bw/error.hpp"
#include "pd2bw/planner/timeline.hpp"

namespace pd2bw::planner {

namespace {

constexpr double kLeft = 120, kRight = 30, kTop = 96, kBar = 20, kComm = 5, kMem = 26, kGap = 14;
constexpr double kBlock = kBar + 3 + kComm + 4 + kMem + kGap;

const char* colour(OpKind k) {
  switch (k) {
    case OpKind::forward: return "#4c78a8";
    case OpKind::backward:
    case OpKind::backward_input: return "#54a24b";
    case OpKind::backward_weight: return "#9ccf8b";
    case OpKind::recompute: return "#f58518";
    case OpKind::allreduce: return "#b279a2";
    case OpKind::update: return "#e45756";
    default: return "#8c8c8c";
  }
}

// `hex` ("#rrggbb") darkened towards black by `share` (0: unchanged, 1: black).
std::string darker(const char* hex, double share) {
  unsigned rgb = 0;
  for (int i = 1; i <= 6; ++i) {
    const char ch = hex[i];
    rgb = rgb * 16 + static_cast<unsigned>(ch <= '9' ? ch - '0' : ch - 'a' + 10);
  }
  auto part = [&](int shift) {
    return static_cast<unsigned>(std::lround((1.0 - share) * static_cast<double>((rgb >> shift) & 0xffu)));
  };
  return fmt::format("#{:02x}{:02x}{:02x}", part(16), part(8), part(0));
}

bool is_comm(OpKind k) {
  return k == OpKind::send_activation || k == OpKind::recv_activation || k == OpKind::send_gradient ||
         k == OpKind::recv_gradient;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

// A tick spacing of 1, 2 or 5 times a power of ten, at least `raw`.
double nice_step(double raw) {
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (f * p >= raw) return f * p;
  return 10.0 * p;
}

double gib(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30); }

struct Canvas {
  std::string out;
  double scale = 1;  // px per ms
  double x(double ms) const { return kLeft + ms * scale; }
  template <class... A>
  void add(fmt::format_string<A...> f, A&&... a) {
    fmt::format_to(std::back_inserter(out), f, std::forward<A>(a)...);
  }
};

// The split backward's halves are named after the schedule that splits it (zb-h1 for the others).
void draw_legend(Canvas& c, double y, const ScheduleSpec& spec) {
  const std::string split(pipeline::splits_backward(spec.kind) ? to_string(spec.kind) : "zb-h1");
  const std::pair<std::string, OpKind> items[] = {{"forward", OpKind::forward},
                                                  {fmt::format("backward ({}: its B)", split), OpKind::backward},
                                                  {fmt::format("{}'s W", split), OpKind::backward_weight},
                                                  {"recompute", OpKind::recompute},
                                                  {"send/recv", OpKind::send_activation},
                                                  {"allreduce", OpKind::allreduce},
                                                  {"update", OpKind::update}};
  double x = kLeft;
  for (const auto& [name, kind] : items) {
    c.add(R"(<rect x="{:.1f}" y="{:.1f}" width="14" height="12" fill="{}"/>)", x, y - 10, colour(kind));
    c.add(R"(<text x="{:.1f}" y="{:.1f}">{}</text>)", x + 18, y, name);
    x += 30 + 7.5 * static_cast<double>(name.size());
  }
  c.add(R"(<rect x="{:.1f}" y="{:.1f}" width="14" height="12" fill="#4c78a8" fill-opacity="0.5"/>)", x, y - 10);
  if (spec.chunks == 1) {
    c.add(R"(<text x="{:.1f}" y="{:.1f}">lighter: odd weight version; numbers: microbatch; grey curve: memory from its floor (dashed: device limit)</text>)",
          x + 18, y);
    return;
  }
  c.add(R"(<rect x="{:.1f}" y="{:.1f}" width="14" height="12" fill="{}"/>)", x + 18, y - 10, darker(colour(OpKind::forward), 0.4));
  c.add(R"(<text x="{:.1f}" y="{:.1f}">lighter: odd weight version; darker: later chunk; 3c1: microbatch 3 of chunk 1; grey curve: memory (dashed: limit)</text>)",
        x + 36, y);
}

void draw_axis(Canvas& c, double total_ms, double bottom) {
  const double step = nice_step(110.0 / c.scale);
  c.add(R"(<g font-size="11" fill="#333">)");
  for (double t = 0; t <= total_ms + 1e-9; t += step) {
    c.add(R"(<line x1="{0:.1f}" x2="{0:.1f}" y1="{1:.1f}" y2="{2:.1f}" stroke="#e4e4e4"/>)", c.x(t), kTop - 6, bottom);
    c.add(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle">{:g}</text>)", c.x(t), kTop - 10, t);
  }
  c.add(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="end">time (ms)</text></g>)", kLeft - 8, kTop - 10);
}

// `shade`: how much darker than its kind's colour (a later chunk of the rank); `chunked`: name chunks.
void draw_event(Canvas& c, const SimEvent& e, double row_y, bool tooltips, double shade, bool chunked) {
  const double x0 = c.x(e.start_ms), w = std::max(0.0, (e.end_ms - e.start_ms) * c.scale);
  const bool comm = is_comm(e.kind);
  const double y = comm ? row_y + kBar + 3 : row_y, h = comm ? kComm : kBar;
  const char* opacity = e.version % 2 == 1 && !comm && e.kind != OpKind::update ? " fill-opacity=\"0.5\"" : "";
  if (e.kind == OpKind::update) {  // zero-width in the model: a marker with the new version
    c.add(R"(<rect x="{:.2f}" y="{:.1f}" width="{:.2f}" height="{:.1f}" fill="{}"/>)", x0 - 1, y - 4,
          std::max(2.0, w), h + 8, colour(e.kind));
    c.add(R"(<text x="{:.1f}" y="{:.1f}" font-size="9" fill="#e45756">v{}</text>)", x0 + 2, y - 1, e.version);
    return;
  }
  const std::string fill = shade > 0 ? darker(colour(e.kind), shade) : std::string(colour(e.kind));
  c.add(R"(<rect x="{:.2f}" y="{:.1f}" width="{:.2f}" height="{:.1f}" fill="{}"{} stroke="#fff" stroke-width="0.5">)",
        x0, y, w, h, fill, opacity);
  if (tooltips && chunked)
    c.add("<title>{} step {} microbatch {} chunk {} version {}: {:.3f}-{:.3f} ms</title>", to_string(e.kind), e.step,
          e.microbatch, e.chunk, e.version, e.start_ms, e.end_ms);
  else if (tooltips)
    c.add("<title>{} step {} microbatch {} version {}: {:.3f}-{:.3f} ms</title>", to_string(e.kind), e.step,
          e.microbatch, e.version, e.start_ms, e.end_ms);
  c.add("</rect>");
  const std::string label = chunked ? fmt::format("{}c{}", e.microbatch, e.chunk) : std::to_string(e.microbatch);
  if (!comm && e.microbatch >= 0 && w >= 7.0 * static_cast<double>(label.size()) + 3)
    c.add(R"(<text x="{:.1f}" y="{:.1f}" font-size="10" fill="#fff" text-anchor="middle">{}</text>)", x0 + w / 2,
          y + 14, label);
}

// The curve spans [lowest point, max(limit, peak)] so the stash's rise and fall is visible.
void draw_memory(Canvas& c, const SimStageResult& s, const SimStage& st, double y, double total_ms) {
  int64_t low = s.peak_bytes;
  for (const auto& point : s.memory_curve) low = std::min(low, point.second);
  const double top = static_cast<double>(std::max(st.limit_bytes, s.peak_bytes));
  const double span = std::max(top - static_cast<double>(low), 1.0);
  auto yv = [&](int64_t b) { return y + kMem - kMem * (static_cast<double>(b - low) / span); };
  std::string pts;
  int64_t prev = low;
  for (const auto& [t, b] : s.memory_curve) {
    if (!pts.empty()) pts += fmt::format("{:.1f},{:.1f} ", c.x(t), yv(prev));
    pts += fmt::format("{:.1f},{:.1f} ", c.x(t), yv(b));
    prev = b;
  }
  pts += fmt::format("{:.1f},{:.1f}", c.x(total_ms), yv(prev));
  c.add(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="#f7f7f7"/>)", kLeft, y,
        total_ms * c.scale, kMem);
  if (st.limit_bytes > 0)
    c.add(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" stroke="#c44" stroke-dasharray="4 3"/>)", kLeft,
          c.x(total_ms), yv(st.limit_bytes), yv(st.limit_bytes));
  c.add(R"(<polyline points="{}" fill="none" stroke="#555" stroke-width="1.2"/>)", pts);
  c.add(R"(<text x="{:.1f}" y="{:.1f}" font-size="10" text-anchor="end" fill="#555">peak {:.2f}/{:.2f} GiB</text>)",
        kLeft - 8, y + 11, gib(s.peak_bytes), gib(st.limit_bytes));
  c.add(R"(<text x="{:.1f}" y="{:.1f}" font-size="10" text-anchor="end" fill="#555">floor {:.2f} GiB</text>)",
        kLeft - 8, y + 23, gib(low));
}

// Row `i` (position i, replica 0): its label, its ops and its memory.
void draw_row(Canvas& c, const SimInput& input, const SimResult& result, size_t i, double total, bool tooltips) {
  const ScheduleSpec& spec = input.spec;
  const bool chunked = spec.chunks > 1;
  const double y = kTop + kBlock * static_cast<double>(i);
  const auto held = pipeline::chunks_at(spec.kind, spec.depth, spec.chunks, static_cast<int64_t>(i));
  const auto& st = input.stages[static_cast<size_t>(held.front())];  // the first chunk: recompute, limit
  c.add(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="end" font-weight="bold">stage {}</text>)", kLeft - 8, y + 14, i);
  if (chunked) {
    std::vector<std::string> layers;
    for (int64_t k : held)
      layers.push_back(fmt::format("chunk {}: layers {}-{}", k, input.stages[static_cast<size_t>(k)].layer_begin,
                                   input.stages[static_cast<size_t>(k)].layer_end - 1));
    c.add(R"(<text x="{:.1f}" y="{:.1f}" font-size="10" text-anchor="end" fill="#555">chunks {}{}<title>{}</title></text>)",
          kLeft - 8, y + 26, fmt::join(held, ", "), st.recompute ? ", recomp." : "", fmt::join(layers, "; "));
  } else {
    c.add(R"(<text x="{:.1f}" y="{:.1f}" font-size="10" text-anchor="end" fill="#555">layers {}-{}{}</text>)",
          kLeft - 8, y + 26, st.layer_begin, st.layer_end - 1, st.recompute ? ", recomp." : "");
  }
  for (const auto& e : result.events) {
    if (e.replica != 0 || static_cast<size_t>(e.stage) != i) continue;
    // The j-th of v chunks in model order is drawn 0.4 j / (v - 1) darker; the update (all chunks) is not.
    const auto j = e.chunk < 0 ? 0 : std::find(held.begin(), held.end(), e.chunk) - held.begin();
    const double shade = chunked ? 0.4 * static_cast<double>(j) / static_cast<double>(spec.chunks - 1) : 0.0;
    draw_event(c, e, y, tooltips, shade, chunked);
  }
  draw_memory(c, result.stages[i], st, y + kBar + 3 + kComm + 4, total);
  c.add("\n");
}

}  // namespace

std::string gantt_svg(const SimInput& input, const SimResult& result, const GanttOptions& options) {
  if (result.events.empty()) throw Error("gantt_svg: the simulation kept no events");
  const auto rows = static_cast<size_t>(input.spec.depth);
  double narrowest = 1e300;
  for (const auto& st : input.stages) {
    if (st.forward_ms > 0) narrowest = std::min(narrowest, st.forward_ms);
    if (st.backward_ms > 0) narrowest = std::min(narrowest, st.backward_ms);
  }
  const double total = std::max(result.total_ms, 1e-9);
  const double max_plot = static_cast<double>(options.max_width_px) - kLeft - kRight;
  Canvas c;
  const double box_px = input.spec.chunks > 1 ? 26.0 : 16.0;  // the narrowest box holds "3c1" with chunks
  c.scale = std::clamp(narrowest < 1e300 ? box_px / narrowest : 1.0, 900.0 / total, max_plot / total);
  const double width = kLeft + total * c.scale + kRight;
  const double height = kTop + kBlock * static_cast<double>(rows) + 10;
  c.add(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{:.0f}" height="{:.0f}" viewBox="0 0 {:.0f} {:.0f}" )"
        R"(font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">)" "\n",
        width, height, width, height);
  c.add(R"(<rect width="100%" height="100%" fill="#fff"/>)" "\n");
  c.add(R"(<text x="{:.1f}" y="22" font-size="15" font-weight="bold">{}</text>)" "\n", kLeft, escape(options.title));
  c.add(
      R"(<text x="{:.1f}" y="42">{} step {:.2f} ms, first step {:.2f} ms, bubble {:.1f}% of rank time; replica 0 of each stage</text>)"
      "\n",
      kLeft, result.steady ? "steady" : "not yet steady:", result.step_ms, result.first_step_ms,
      100.0 * result.bubble_fraction);
  draw_legend(c, 64, input.spec);
  const double bottom = kTop + kBlock * static_cast<double>(rows) - kGap;
  draw_axis(c, total, bottom);
  const bool tooltips = result.events.size() <= 20000;
  for (size_t i = 0; i < rows; ++i) draw_row(c, input, result, i, total, tooltips);
  c.add("</svg>\n");
  return c.out;
}

}  // namespace pd2bw::planner
