// The attention's heads, one description for every backend. A token's packed attention inputs are
// one row [q (heads·head_dim) | k (kv_heads·head_dim) | v (kv_heads·head_dim)]; query head h reads
// key and value head h / group(): grouped-query attention (kv_heads == heads: multi-head; 1:
// multi-query). kv_heads divides heads.
#pragma once

namespace pylon {

struct HeadLayout {
  int heads, kv_heads, head_dim;
  int group() const { return heads / kv_heads; }  // query heads per key/value head
  int q_dim() const { return heads * head_dim; }
  int kv_dim() const { return kv_heads * head_dim; }
  int row() const { return q_dim() + 2 * kv_dim(); }  // a token's qkv values
  static HeadLayout multi_head(int dim, int heads) { return {heads, heads, dim / heads}; }
};

}  // namespace pylon
