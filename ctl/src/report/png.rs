//! PNG: the SVG chart drawn in pure Rust (resvg, tiny-skia) with the DejaVu Sans fonts
//! embedded in the binary, so a machine without fonts (CI, a server) draws the same text.

use std::sync::Arc;

const REGULAR: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
const BOLD: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans-Bold.ttf");

/// Pixels per SVG unit: twice the size, sharp on high-density screens and slides.
const SCALE: f32 = 2.0;

pub fn png(svg: &str) -> Result<Vec<u8>, String> {
    let mut fonts = resvg::usvg::fontdb::Database::new();
    fonts.load_font_data(REGULAR.to_vec());
    fonts.load_font_data(BOLD.to_vec());
    fonts.set_sans_serif_family("DejaVu Sans");
    let options = resvg::usvg::Options {
        font_family: "DejaVu Sans".into(),
        fontdb: Arc::new(fonts),
        ..Default::default()
    };
    let tree = resvg::usvg::Tree::from_str(svg, &options)
        .map_err(|e| format!("cannot draw the chart: {e}"))?;
    let size = tree
        .size()
        .to_int_size()
        .scale_by(SCALE)
        .ok_or("chart too large")?;
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or("cannot allocate the picture")?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::from_scale(SCALE, SCALE),
        &mut pixmap.as_mut(),
    );
    pixmap
        .encode_png()
        .map_err(|e| format!("cannot encode the PNG: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testdata::sample;

    #[test]
    fn the_chart_is_a_png_with_text_drawn() {
        let bytes = png(&crate::report::svg(&sample())).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
        let img = resvg::tiny_skia::Pixmap::decode_png(&bytes).unwrap();
        assert_eq!((img.width(), img.height()), (1800, 1040));
        // The title row is drawn with the embedded font: dark pixels where its text is.
        let dark = (40..70)
            .flat_map(|y| (150..700).map(move |x| (x, y)))
            .filter(|&(x, y)| img.pixel(x, y).is_some_and(|p| p.red() < 100))
            .count();
        assert!(dark > 500, "title text drawn: {dark} dark pixels");
    }
}
