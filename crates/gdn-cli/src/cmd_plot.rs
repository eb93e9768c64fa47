//! `gdn plot`: an SVG from a `gdn bench --json` file: decode latency vs batch with the copy floor, decode
//! fraction of the copy roofline vs batch, and prefill latency per anchor configuration.

use anyhow::{bail, Context, Result};
use plotters::prelude::*;
use serde_json::Value;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A bench JSON (`gdn bench --json FILE`).
    #[arg(long)]
    input: PathBuf,
    /// The SVG to write.
    #[arg(long)]
    output: PathBuf,
}

/// One plotted series: a name and (x, y) points.
type Series = (String, Vec<(f64, f64)>);

const COLORS: [RGBColor; 5] = [BLUE, RED, GREEN, MAGENTA, CYAN];

fn f(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

fn classes<'a>(doc: &'a Value, op: &str) -> impl Iterator<Item = &'a Value> + 'a {
    let op = op.to_string();
    doc["classes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(move |c| c["op"] == op.as_str() && c["mix"] == false)
}

/// Per tier: (x, y) for every workload of the anchor classes of `op`, plus the copy floor series.
fn series(
    doc: &Value,
    op: &str,
    y: &dyn Fn(&Value) -> f64,
    x: &dyn Fn(usize, &Value) -> f64,
) -> Vec<Series> {
    let mut out: Vec<Series> = vec![];
    let mut floor = vec![];
    for c in classes(doc, op) {
        for (i, w) in c["workloads"].as_array().into_iter().flatten().enumerate() {
            for (j, t) in w["tiers"].as_array().into_iter().flatten().enumerate() {
                let name = t["tier"].as_str().unwrap_or("?").to_string();
                let pt = (x(i, w), y(t));
                match out.iter_mut().find(|s| s.0 == name) {
                    Some(s) => s.1.push(pt),
                    None => out.push((name, vec![pt])),
                }
                if j == 0 {
                    floor.push((x(i, w), f(t, "copy_median_us")));
                }
            }
        }
    }
    out.retain(|s| s.1.iter().all(|p| p.0.is_finite() && p.1.is_finite()));
    if !floor.is_empty() {
        out.push(("copy floor".into(), floor));
    }
    out
}

fn range(ss: &[Series], pick: fn(&(f64, f64)) -> f64) -> (f64, f64) {
    let vals = ss
        .iter()
        .flat_map(|s| s.1.iter().map(pick))
        .filter(|v| v.is_finite() && *v > 0.0);
    let (lo, hi) = vals.fold((f64::INFINITY, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        (1.0, 10.0)
    } else {
        (lo / 1.5, hi * 1.5)
    }
}

fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    ylabel: &str,
    ss: &[Series],
    log_y: bool,
    xlabels: Option<&[String]>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let (x0, x1) = range(ss, |p| p.0);
    let (y0, y1) = range(ss, |p| p.1);
    let mut b = ChartBuilder::on(area);
    b.caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70);
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("drawing: {e}");
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            let mut mesh = chart.configure_mesh();
            let yfmt = |y: &f64| crate::table::num(*y);
            let batch_fmt = |x: &f64| format!("{x:.0}");
            mesh.y_desc(ylabel).y_label_formatter(&yfmt);
            let fmt = |x: &f64| match xlabels {
                Some(l) => l
                    .get(x.round() as usize)
                    .filter(|_| (x - x.round()).abs() < 1e-6)
                    .cloned()
                    .unwrap_or_default(),
                None => format!("{x}"),
            };
            match xlabels {
                Some(l) => mesh
                    .x_labels(l.len())
                    .x_label_formatter(&fmt)
                    .x_desc("configuration"),
                None => mesh.x_desc("batch size").x_label_formatter(&batch_fmt),
            };
            mesh.draw().map_err(err)?;
            for (i, (name, pts)) in ss.iter().enumerate() {
                let c = if name == "copy floor" {
                    BLACK
                } else {
                    COLORS[i % COLORS.len()]
                };
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                    .map_err(err)?
                    .label(name.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(err)?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE)
                .border_style(BLACK)
                .draw()
                .map_err(err)?;
        }};
    }
    match (xlabels.is_some(), log_y) {
        (true, _) => {
            let n = xlabels.map_or(1, |l| l.len()) as f64;
            body!(b
                .build_cartesian_2d(-0.5..(n - 0.5), (y0..y1).log_scale())
                .map_err(err)?)
        }
        (false, true) => body!(b
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
            .map_err(err)?),
        (false, false) => body!(b
            .build_cartesian_2d((x0..x1).log_scale(), 0.0..(y1 / 1.5 * 1.1).max(100.0))
            .map_err(err)?),
    }
    Ok(())
}

pub fn main(a: Args) -> Result<()> {
    let text = std::fs::read_to_string(&a.input)
        .with_context(|| format!("reading {}", a.input.display()))?;
    let doc: Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", a.input.display()))?;
    if doc["schema"] != "gdn-bench/1" {
        bail!(
            "{}: not a gdn bench JSON (schema gdn-bench/1)",
            a.input.display()
        );
    }
    let batch = |_: usize, w: &Value| f(w, "batch");
    let lat = series(&doc, "decode", &|t| f(t, "median_us"), &batch);
    let mut pct = series(&doc, "decode", &|t| f(t, "pct_of_copy"), &batch);
    pct.retain(|s| s.0 != "copy floor");
    let pre = series(&doc, "prefill", &|t| f(t, "median_us"), &|i, _| i as f64);
    let labels: Vec<String> = classes(&doc, "prefill")
        .flat_map(|c| c["workloads"].as_array().into_iter().flatten())
        .map(|w| w["label"].as_str().unwrap_or("?").to_string())
        .collect();
    if lat.is_empty() && pre.is_empty() {
        bail!(
            "{}: no decode or prefill anchor results to plot",
            a.input.display()
        );
    }
    let tmp = a.output.with_extension("svg.tmp");
    {
        let root = SVGBackend::new(&tmp, (1000, 1350)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| anyhow::anyhow!("drawing: {e}"))?;
        let parts = root.split_evenly((3, 1));
        let title = |s: &str| {
            format!(
                "{s} — {} ({})",
                doc["backend"].as_str().unwrap_or("?"),
                doc["device"].as_str().unwrap_or("?")
            )
        };
        if !lat.is_empty() {
            draw(
                &parts[0],
                &title("decode latency vs batch"),
                "median µs",
                &lat,
                true,
                None,
            )?;
            draw(
                &parts[1],
                &title("decode: % of copy bandwidth"),
                "% of copy floor",
                &pct,
                false,
                None,
            )?;
        }
        if !pre.is_empty() {
            draw(
                &parts[2],
                &title("prefill latency per configuration"),
                "median µs",
                &pre,
                true,
                Some(&labels),
            )?;
        }
        root.present()
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", a.output.display()))?;
    }
    std::fs::rename(&tmp, &a.output).with_context(|| format!("writing {}", a.output.display()))?;
    eprintln!("wrote {}", a.output.display());
    Ok(())
}
