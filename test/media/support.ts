// Shared by the media tests: ranged reads of an in-memory file, counted.
import type { RangeReader } from '../../media/mp4';

export function fileReader(bytes: Buffer): { read: RangeReader; reads: () => number } {
  let n = 0;
  return {
    read: async (offset, length) => {
      n += 1;
      return bytes.subarray(offset, offset + length);
    },
    reads: () => n,
  };
}
