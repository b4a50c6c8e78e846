{# The direct convolutions' epilogue (conv.cu, conv3d.cu), where `r` holds a value's sum plus
   its bias and `oc` its channel: a PRelu slope from the channel table, the activations, then
   a residual and what follows it. #}
{% if has_slope %}
        const float slope = chan[{{ OC }}u + oc];
{% endif %}
{% for e in epilogue %}
        r = {{ e }};
{% endfor %}
{% if residual %}
        // + the residual (an Add of a same-shaped tensor), then what follows the Add.
        r += {{ rload }};
{% for e in post %}
        r = {{ e }};
{% endfor %}
{% endif %}
