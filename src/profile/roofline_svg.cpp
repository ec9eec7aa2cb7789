// The roofline chart as a standalone SVG: log-log axes with decade ticks, roofs min(BW x AI, peak)
// for the tensor and fp32 ceilings, one dot per kernel that has FLOP and byte counts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "io/atomic_file.h"
#include "profile/roofline.h"

namespace pylon::profile {
namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') out += c;  // XML 1.0 has no other controls
    }
  }
  return out;
}

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

const char* colour(Bound b) {
  switch (b) {
    case Bound::memory: return "#1f77b4";
    case Bound::compute: return "#d62728";
    case Bound::latency: return "#7f7f7f";
  }
  return "#000";
}

}  // namespace

std::string roofline_svg(const std::vector<KernelVerdict>& v, const DeviceCeilings& c) {
  constexpr double W = 960, H = 620, L = 90, R = 230, T = 50, B = 70;  // size and margins (px)
  double total = 0;
  std::vector<const KernelVerdict*> dots;
  for (const KernelVerdict& x : v) {
    total += x.k.seconds;
    if (x.intensity > 0 && x.flops_per_s > 0) dots.push_back(&x);
  }
  // Axis ranges in decades, wide enough for the dots and the ridge points.
  double x_lo = 1e-1, x_hi = 1e3, y_lo = 1e10, y_hi = std::max({c.tensor_flops, c.fp32_flops, 1e13});
  for (const KernelVerdict* d : dots) {  // near-empty kernels would squash the chart: they sit on its edge
    x_lo = std::max(1e-2, std::min(x_lo, d->intensity)), x_hi = std::max(x_hi, d->intensity);
    y_lo = std::max(1e9, std::min(y_lo, d->flops_per_s)), y_hi = std::max(y_hi, d->flops_per_s);
  }
  if (c.dram_bytes_per_s > 0)
    for (double peak : {c.tensor_flops, c.fp32_flops})
      if (peak > 0) x_hi = std::max(x_hi, 4 * peak / c.dram_bytes_per_s);
  const double dx_lo = std::floor(std::log10(x_lo)), dx_hi = std::ceil(std::log10(x_hi));
  const double dy_lo = std::floor(std::log10(y_lo)), dy_hi = std::ceil(std::log10(y_hi * 1.5));
  // The grid has a line per decade: an infinite figure (refused by the readers) would never end it.
  PYLON_ASSERT(std::isfinite(dx_hi) && std::isfinite(dy_hi) && std::isfinite(dx_lo) && std::isfinite(dy_lo),
               "roofline chart of non-finite figures");
  auto px = [&](double ai) {
    return L + std::clamp((std::log10(ai) - dx_lo) / (dx_hi - dx_lo), 0.0, 1.0) * (W - L - R);
  };
  auto py = [&](double f) {
    return H - B - std::clamp((std::log10(f) - dy_lo) / (dy_hi - dy_lo), 0.0, 1.0) * (H - T - B);
  };

  std::string s;
  s += fmt(R"~(<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">)~",
           W, H, W, H) + "\n";
  s += fmt(R"~(<rect width="%.0f" height="%.0f" fill="white"/>)~", W, H) + "\n";
  s += "<text x=\"" + fmt("%.0f", L) + "\" y=\"28\" font-size=\"16\">Roofline: " +
       xml_escape(c.device.empty() ? "unnamed device" : c.device) + "</text>\n";
  for (double d = dx_lo; d <= dx_hi; ++d) {  // vertical grid and x labels
    const double x = px(std::pow(10, d));
    s += fmt(R"~(<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>)~", x, T, x, H - B) + "\n";
    s += fmt(R"~(<text x="%.1f" y="%.1f" text-anchor="middle">1e%.0f</text>)~", x, H - B + 18, d) + "\n";
  }
  for (double d = dy_lo; d <= dy_hi; ++d) {  // horizontal grid and y labels
    const double y = py(std::pow(10, d));
    s += fmt(R"~(<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>)~", L, y, W - R, y) + "\n";
    s += fmt(R"~(<text x="%.1f" y="%.1f" text-anchor="end">1e%.0f</text>)~", L - 6, y + 4, d) + "\n";
  }
  s += fmt(R"~(<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>)~", L, T, W - L - R, H - T - B) + "\n";
  s += fmt(R"~(<text x="%.1f" y="%.1f" text-anchor="middle">arithmetic intensity (FLOP per DRAM byte)</text>)~",
           (L + W - R) / 2, H - 20) + "\n";
  s += fmt(R"~(<text transform="translate(22 %.1f) rotate(-90)" text-anchor="middle">achieved FLOP/s</text>)~",
           (T + H - B) / 2) + "\n";
  // Roofs: min(bandwidth x intensity, peak), drawn as polylines over the x range.
  struct Roof { double peak; const char* label; const char* dash; };
  for (const Roof& r : {Roof{c.tensor_flops, "bf16 tensor", ""}, Roof{c.fp32_flops, "fp32", "6,4"}}) {
    if (r.peak <= 0) continue;
    const double x0 = std::pow(10, dx_lo), x1 = std::pow(10, dx_hi);
    std::string points;
    if (c.dram_bytes_per_s > 0) {
      const double ridge = r.peak / c.dram_bytes_per_s;
      const double start = std::max(x0, std::pow(10, dy_lo) / c.dram_bytes_per_s);
      points += fmt("%.1f,%.1f ", px(start), py(c.dram_bytes_per_s * start));
      if (ridge > start && ridge < x1) points += fmt("%.1f,%.1f ", px(ridge), py(r.peak));
    } else {
      points += fmt("%.1f,%.1f ", px(x0), py(r.peak));
    }
    points += fmt("%.1f,%.1f", px(x1), py(r.peak));
    s += "<polyline points=\"" + points + "\" fill=\"none\" stroke=\"#000\" stroke-width=\"2\"" +
         (*r.dash ? std::string(" stroke-dasharray=\"") + r.dash + "\"" : std::string()) + "/>\n";
    s += fmt(R"~(<text x="%.1f" y="%.1f" text-anchor="end">)~", W - R - 4, py(r.peak) - 6) + r.label +
         fmt(" %.1f TFLOP/s</text>", r.peak / 1e12) + "\n";
  }
  if (c.dram_bytes_per_s > 0)
    s += fmt(R"~(<text x="%.1f" y="%.1f">HBM %.0f GB/s</text>)~", L + 8, T + 16, c.dram_bytes_per_s / 1e9) + "\n";
  // Dots, largest first so small ones stay visible on top.
  std::sort(dots.begin(), dots.end(), [](const KernelVerdict* a, const KernelVerdict* b) { return a->k.seconds > b->k.seconds; });
  for (const KernelVerdict* d : dots) {
    const double share = total > 0 ? d->k.seconds / total : 0;
    s += fmt(R"~(<circle cx="%.1f" cy="%.1f" r="%.1f" fill-opacity="0.7" )~", px(d->intensity), py(d->flops_per_s),
             3 + 14 * std::sqrt(share)) +
         "fill=\"" + colour(d->bound) + "\"><title>" + xml_escape(d->k.name) +
         fmt(": %.1f%% of time, %.2f TFLOP/s, %.1f FLOP/B, SM %.0f%%", 100 * share, d->flops_per_s / 1e12,
             d->intensity, d->k.sm_pct) +
         fmt(", DRAM %.0f%%</title></circle>", d->k.dram_pct) + "\n";
  }
  // Legend: the verdict colours and the longest kernels' names.
  double y = T + 10;
  for (Bound b : {Bound::memory, Bound::compute, Bound::latency}) {
    s += fmt(R"~(<circle cx="%.1f" cy="%.1f" r="6" fill-opacity="0.7" )~", W - R + 20, y) + "fill=\"" + colour(b) +
         "\"/>" + fmt(R"~(<text x="%.1f" y="%.1f">)~", W - R + 32, y + 4) + bound_name(b) + "</text>\n";
    y += 20;
  }
  s += fmt(R"~(<text x="%.1f" y="%.1f">%.0f of %.0f kernels placed (FLOP and byte counts)</text>)~", W - R + 14, y + 6,
           static_cast<double>(dots.size()), static_cast<double>(v.size())) + "\n";
  y += 26;
  for (size_t i = 0; i < dots.size() && i < 12; ++i, y += 16) {
    std::string name = dots[i]->k.name.size() > 30 ? dots[i]->k.name.substr(0, 28) + "..." : dots[i]->k.name;
    s += fmt(R"~(<text x="%.1f" y="%.1f" font-size="10" )~", W - R + 14, y) + "fill=\"" + colour(dots[i]->bound) +
         "\">" + xml_escape(name) + fmt(" (%.1f%%)</text>", total > 0 ? 100 * dots[i]->k.seconds / total : 0) + "\n";
  }
  s += "</svg>\n";
  return s;
}

void write_roofline_svg(const std::vector<KernelVerdict>& v, const DeviceCeilings& c, const std::string& path) {
  write_file_atomic(path, roofline_svg(v, c));
}

}  // namespace pylon::profile
