//! Placeholder until the corner-turn and re-frame kernels land (branch `convert`).
use crate::options::ArgError;
use crate::vdif::Header;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransformSpec {
    pub threads: Option<Vec<u32>>,
    pub channels: Option<Vec<u32>>,
    pub payload: Option<usize>,
}

impl TransformSpec {
    pub fn is_identity(&self) -> bool {
        self.threads.is_none() && self.channels.is_none() && self.payload.is_none()
    }
    pub fn build(&self, first: &Header) -> Result<Transform, ArgError> {
        if self.channels.is_some() || self.payload.is_some() {
            return Err(ArgError::new(
                "channels",
                "corner-turning and re-framing are not built yet",
            ));
        }
        Ok(Transform {
            threads: self.threads.clone(),
            frame_size: first.frame_size(),
        })
    }
}

pub fn parse_index_list(name: &str, text: &str) -> Result<Vec<u32>, ArgError> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let v: u32 = part
            .trim()
            .parse()
            .map_err(|_| ArgError::new(name, format!("cannot read {part:?}")))?;
        out.push(v);
    }
    Ok(out)
}

pub struct Transform {
    threads: Option<Vec<u32>>,
    frame_size: usize,
}

impl Transform {
    pub fn wants(&self, thread_id: u32) -> bool {
        self.threads.as_ref().is_none_or(|t| t.contains(&thread_id))
    }
    pub fn apply(&mut self, frame: &[u8], out: &mut Vec<u8>) -> Result<usize, String> {
        out.extend_from_slice(frame);
        Ok(1)
    }
    pub fn out_frame_size(&self) -> usize {
        self.frame_size
    }
    pub fn fan_out(&self) -> usize {
        1
    }
}
