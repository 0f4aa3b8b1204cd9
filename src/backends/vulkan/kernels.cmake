# Every Vulkan kernel kiln embeds: "name|shader|DEFINE,DEFINE". CMakeLists.txt compiles each with glslc.
# A shader's defines choose the storage type of its tensors: T_F16 makes the tensors float16 (arithmetic
# stays float32), otherwise float32. The matmul kernels name their three operands' types separately
# (A_F16, B_F16, C_F16) for attention, whose scores and probabilities stay float32. Products come in four
# builds (gemm_build.glsl): 128x128 tiles (gemm_tile.glsl; its "_r64" and "_c64" builds, of matmul and conv2d only,
# 64x128 and 128x64), SMALL 64x64 tiles (gemm_tile_small.glsl), DIRECT,
# without shared memory (gemm_direct.glsl), for devices that run on the CPU, and, for float16 products, COOP
# on matrix units through VK_NV_cooperative_matrix (gemm_coop.glsl), made only on devices that have them;
# the "_coopk_" kernels are that build through VK_KHR_cooperative_matrix (COOP_KHR), compiled by glslangValidator
# 13+ (CMakeLists.txt: KILN_GLSLANG) and left out of builds without one. The "_q8" products read a q8_0 weight
# as blocks (B_Q8, W_Q8: blocks.glsl), in the FMA builds only (KILN_VULKAN_Q8=fused, docs/VULKAN.md). The
# "flash_attention_coopk_<D>" kernels are attention on the matrix units for heads of up to 16 D dimensions; the
# "flash_attention_c<C>" kernels attention with FMAs for heads of up to 16 C dimensions, their "_rg2" builds with two
# row groups (128 queries) a workgroup (VulkanDeviceOps::flash_attention).
set(KILN_VULKAN_KERNELS
  "convert_f32_f16|convert.comp|DST_F16"
  "convert_f16_f32|convert.comp|SRC_F16"
  "dequantize_f32|dequantize.comp"
  "dequantize_f16|dequantize.comp|T_F16"
  "dequantize_q8_f16x8|dequantize.comp|T_F16,PACK8"
  "dequantize_k_f16x8|dequantize.comp|T_F16,PACK8K"
  "matmul_f32|matmul.comp"
  "matmul_f16|matmul.comp|A_F16,B_F16,C_F16"
  "matmul_scores_f16|matmul.comp|A_F16,B_F16"
  "matmul_pv_f16|matmul.comp|B_F16,C_F16"
  "conv2d_f32|conv2d.comp"
  "conv2d_f16|conv2d.comp|T_F16"
  "conv_columns_f32|conv_columns.comp"
  "conv_columns_f16|conv_columns.comp|T_F16"
  "matmul_small_f32|matmul.comp|SMALL"
  "matmul_small_f16|matmul.comp|SMALL,A_F16,B_F16,C_F16"
  "matmul_scores_small_f16|matmul.comp|SMALL,A_F16,B_F16"
  "matmul_pv_small_f16|matmul.comp|SMALL,B_F16,C_F16"
  "conv2d_small_f32|conv2d.comp|SMALL"
  "conv2d_small_f16|conv2d.comp|SMALL,T_F16"
  "matmul_r64_f32|matmul.comp|TILE_ROWS_64"
  "matmul_r64_f16|matmul.comp|TILE_ROWS_64,A_F16,B_F16,C_F16"
  "matmul_c64_f32|matmul.comp|TILE_COLS_64"
  "matmul_c64_f16|matmul.comp|TILE_COLS_64,A_F16,B_F16,C_F16"
  "conv2d_r64_f32|conv2d.comp|TILE_ROWS_64"
  "conv2d_r64_f16|conv2d.comp|TILE_ROWS_64,T_F16"
  "conv2d_c64_f32|conv2d.comp|TILE_COLS_64"
  "conv2d_c64_f16|conv2d.comp|TILE_COLS_64,T_F16"
  "matmul_direct_f32|matmul.comp|DIRECT"
  "matmul_direct_f16|matmul.comp|DIRECT,A_F16,B_F16,C_F16"
  "matmul_scores_direct_f16|matmul.comp|DIRECT,A_F16,B_F16"
  "matmul_pv_direct_f16|matmul.comp|DIRECT,B_F16,C_F16"
  "conv2d_direct_f32|conv2d.comp|DIRECT"
  "conv2d_direct_f16|conv2d.comp|DIRECT,T_F16"
  "matmul_coop_f16|matmul.comp|COOP,A_F16,B_F16,C_F16"
  "matmul_scores_coop_f16|matmul.comp|COOP,A_F16,B_F16"
  "matmul_pv_coop_f16|matmul.comp|COOP,B_F16,C_F16"
  "conv2d_coop_f16|conv2d.comp|COOP,T_F16"
  "matmul_coopk_f16|matmul.comp|COOP,COOP_KHR,A_F16,B_F16,C_F16"
  "matmul_scores_coopk_f16|matmul.comp|COOP,COOP_KHR,A_F16,B_F16"
  "matmul_pv_coopk_f16|matmul.comp|COOP,COOP_KHR,B_F16,C_F16"
  "conv2d_coopk_f16|conv2d.comp|COOP,COOP_KHR,T_F16"
  "matmul_q8_f32|matmul.comp|B_Q8"
  "matmul_q8_f16|matmul.comp|A_F16,B_Q8,C_F16"
  "matmul_q8_small_f32|matmul.comp|SMALL,B_Q8"
  "matmul_q8_small_f16|matmul.comp|SMALL,A_F16,B_Q8,C_F16"
  "matmul_q8_direct_f32|matmul.comp|DIRECT,B_Q8"
  "matmul_q8_direct_f16|matmul.comp|DIRECT,A_F16,B_Q8,C_F16"
  "conv2d_q8_f32|conv2d.comp|W_Q8"
  "conv2d_q8_f16|conv2d.comp|T_F16,W_Q8"
  "conv2d_q8_small_f32|conv2d.comp|SMALL,W_Q8"
  "conv2d_q8_small_f16|conv2d.comp|SMALL,T_F16,W_Q8"
  "conv2d_q8_direct_f32|conv2d.comp|DIRECT,W_Q8"
  "conv2d_q8_direct_f16|conv2d.comp|DIRECT,T_F16,W_Q8"
  "channel_sums_f32|channel_sums.comp"
  "channel_sums_f16|channel_sums.comp|T_F16"
  "group_norm_stats_f32|group_norm_stats.comp"
  "group_norm_stats_f16|group_norm_stats.comp|T_F16"
  "group_norm_apply_f32|group_norm_apply.comp"
  "group_norm_apply_f16|group_norm_apply.comp|T_F16"
  "layer_norm_f32|layer_norm.comp"
  "layer_norm_f16|layer_norm.comp|T_F16"
  "flash_attention_c2_f32|flash_attention.comp|COLS=2u"
  "flash_attention_c2_f16|flash_attention.comp|COLS=2u,T_F16"
  "flash_attention_c3_f32|flash_attention.comp|COLS=3u"
  "flash_attention_c3_f16|flash_attention.comp|COLS=3u,T_F16"
  "flash_attention_c4_f32|flash_attention.comp|COLS=4u"
  "flash_attention_c4_f16|flash_attention.comp|COLS=4u,T_F16"
  "flash_attention_c5_f32|flash_attention.comp|COLS=5u"
  "flash_attention_c5_f16|flash_attention.comp|COLS=5u,T_F16"
  "flash_attention_c8_f32|flash_attention.comp|COLS=8u"
  "flash_attention_c8_f16|flash_attention.comp|COLS=8u,T_F16"
  "flash_attention_c10_f32|flash_attention.comp|COLS=10u"
  "flash_attention_c10_f16|flash_attention.comp|COLS=10u,T_F16"
  "flash_attention_c16_f32|flash_attention.comp|COLS=16u"
  "flash_attention_c16_f16|flash_attention.comp|COLS=16u,T_F16"
  "flash_attention_c2_rg2_f32|flash_attention.comp|COLS=2u,RG=2u"
  "flash_attention_c2_rg2_f16|flash_attention.comp|COLS=2u,RG=2u,T_F16"
  "flash_attention_c3_rg2_f32|flash_attention.comp|COLS=3u,RG=2u"
  "flash_attention_c3_rg2_f16|flash_attention.comp|COLS=3u,RG=2u,T_F16"
  "flash_attention_c4_rg2_f32|flash_attention.comp|COLS=4u,RG=2u"
  "flash_attention_c4_rg2_f16|flash_attention.comp|COLS=4u,RG=2u,T_F16"
  "flash_attention_coopk_3_f16|flash_attention_coop.comp|COOP_KHR,D_TILES=3,T_F16"
  "flash_attention_coopk_4_f16|flash_attention_coop.comp|COOP_KHR,D_TILES=4,T_F16"
  "flash_attention_coopk_5_f16|flash_attention_coop.comp|COOP_KHR,D_TILES=5,T_F16"
  "flash_attention_coopk_8_f16|flash_attention_coop.comp|COOP_KHR,D_TILES=8,T_F16"
  "flash_attention_coopk_10_f16|flash_attention_coop.comp|COOP_KHR,D_TILES=10,T_F16"
  "softmax_f32|softmax.comp"
  "softmax_f16|softmax.comp|T_F16"
  "unary_f32|unary.comp"
  "unary_f16|unary.comp|T_F16"
  "binary_f32|binary.comp"
  "binary_f16|binary.comp|T_F16"
  "geglu_f32|geglu.comp"
  "geglu_f16|geglu.comp|T_F16"
  "layout_f32|layout.comp"
  "layout_f16|layout.comp|T_F16"
  "timestep_embedding_f32|timestep_embedding.comp"
  "timestep_embedding_f16|timestep_embedding.comp|T_F16"
)
# Issue 23's other matrix tiles (gemm_coop.glsl's geometries; vulkan_backend.cpp lists the names): four kernels each.
# sg32w is also the measured choice's second matrix build (vulkan_product_builds.cpp, kMatrixWide).
foreach(variant "sg32|COOP_SG32" "f16acc|COOP_F16_SUMS" "sg32w|COOP_SG32,COOP_WIDE")
  string(REPLACE "|" ";" variant "${variant}")
  list(GET variant 0 v)
  list(GET variant 1 d)
  list(APPEND KILN_VULKAN_KERNELS
    "matmul_coopk_${v}_f16|matmul.comp|COOP,COOP_KHR,${d},A_F16,B_F16,C_F16"
    "matmul_scores_coopk_${v}_f16|matmul.comp|COOP,COOP_KHR,${d},A_F16,B_F16"
    "matmul_pv_coopk_${v}_f16|matmul.comp|COOP,COOP_KHR,${d},B_F16,C_F16"
    "conv2d_coopk_${v}_f16|conv2d.comp|COOP,COOP_KHR,${d},T_F16")
endforeach()
# q8_0 weights read as blocks by the default matrix kernel and its wide tiles (KILN_VULKAN_Q8=fused; docs/VULKAN.md).
list(APPEND KILN_VULKAN_KERNELS
  "matmul_q8_coopk_sg32_f16|matmul.comp|COOP,COOP_KHR,COOP_SG32,A_F16,B_Q8,C_F16"
  "conv2d_q8_coopk_sg32_f16|conv2d.comp|COOP,COOP_KHR,COOP_SG32,T_F16,W_Q8"
  "matmul_q8_coopk_sg32w_f16|matmul.comp|COOP,COOP_KHR,COOP_SG32,COOP_WIDE,A_F16,B_Q8,C_F16"
  "conv2d_q8_coopk_sg32w_f16|conv2d.comp|COOP,COOP_KHR,COOP_SG32,COOP_WIDE,T_F16,W_Q8")
# Measurement only (issue 23): the matrix units' multiply-add rate by itself (bench/vulkan/coop_peak_bench.cpp).
list(APPEND KILN_VULKAN_KERNELS "peak_coopk_f32acc|coop_peak.comp" "peak_coopk_f16acc|coop_peak.comp|ACC_F16"
     "peak_coopk_f32glob|coop_peak.comp|GLOBAL_FETCH")
